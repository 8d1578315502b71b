"""The call a compiled module runs: eager, verified against eager, or compiled.

Part of the zero-code path (:mod:`.autocompile`); standard library only at import.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from trcomp.runtime import regions
from trcomp.runtime.regions import RegionalCall
from trcomp_container.inprocess import torch_compat
from trcomp_container.inprocess.compiled import (
    CODE_NAME,
    REASON_CHARS,
    CompiledModule,
    trained,
    went_through_compiled,
)
from trcomp_container.inprocess.verify import put_back, state_of, tensors

if TYPE_CHECKING:
    from trcomp_container.inprocess.autocompile import AutoCompile

__all__ = [
    "BY_RUNTIME",
    "MAX_CHECKED_CALLS",
    "adopt",
    "guarded_call",
    "recompiled_call",
    "traced_call",
]

BY_RUNTIME = "trcomp.runtime.compile"
"""Who compiled a module that the script compiled through ``trcomp.runtime.compile``."""

MAX_CHECKED_CALLS = 8
"""Calls of one module in one check round at most (a loop that steps no optimizer)."""
_FAILED = object()


def guarded_call(
    owner: AutoCompile, module: Any, compiled: Callable[..., Any], entry: CompiledModule
) -> Callable[..., Any]:
    """The call that ``module(...)`` runs once compiled: eager when it must, compiled
    otherwise (each new graph checked at its first call, :mod:`.graphcheck`); a compile
    error runs it eager (``fallback``)."""
    dynamo_error = torch_compat.dynamo_exception()
    torch = owner.torch
    grads = trained(module)

    def call(*args: Any, **kwargs: Any) -> Any:
        nonlocal compiled, grads
        # torch.jit.trace of the model (an export after training) records eager ops.
        if entry.failed is not None or owner.mode.hook_eager or torch.jit.is_tracing():
            return entry.run_eager(module, *args, **kwargs)
        now = trained(module)
        if now != grads:
            grads, compiled = now, recompiled_call(owner, module, entry, compiled)
        entry.calls += 1
        entry.last_call_eager = False
        checking = entry.checking
        # Its state before the call: a failed compile after a graph break may already
        # have run the forward's first part (BatchNorm's statistics updated), and eager
        # runs it from there.
        saved = state_of(torch, module) if entry.calls <= 3 else None
        # The module's own pre-hook does not run on this path (nn.Module calls
        # _compiled_call_impl instead of _call_impl): count the call as the outermost
        # one, so what the compiled code calls is not taken for the script's model
        # (torch 2.14's aot_eager runs the graph as an fx GraphModule, grad disabled).
        owner.depth += 1
        outer, owner.running = owner.running, entry
        try:
            out = compiled(*args, **kwargs)
            if entry.calls <= 3 and not entry.ran_aot:
                _look_for_compiled_code(entry, out)
        except dynamo_error as exc:
            if not owner.fallback_eager:
                raise
            # The eager call below raises the script's own error if it was one.
            entry.failed = f"{type(exc).__name__}: {exc}"[:REASON_CHARS]
            if saved is not None:
                put_back(torch, module, saved)
            out = _FAILED
        finally:
            owner.depth = max(0, owner.depth - 1)
            owner.running = outer
        if out is _FAILED:
            return entry.run_eager(module, *args, **kwargs)
        if checking and entry.checking:
            entry.checked_calls += 1
            if entry.checked_calls >= MAX_CHECKED_CALLS:
                owner.conclude()  # a loop without an optimizer: do not check forever
        return out

    return call


def _look_for_compiled_code(entry: CompiledModule, out: Any) -> None:
    """Count whether this call's output went through compiled code (its first calls only)."""
    first = next((t for t in tensors(out) if getattr(t, "requires_grad", False)), None)
    found = went_through_compiled(first, torch_compat.COMPILED_BACKWARD_NODE)
    if found is not None:
        entry.graphs_seen = (entry.graphs_seen or 0) + int(found)


def adopt(owner: AutoCompile, optimized: Any, *, by: str = BY_RUNTIME) -> CompiledModule:
    """Check a model compiled through ``trcomp.runtime.compile`` (or by Accelerate at
    trcomp's request, ``by``) as the hook's own.

    ``optimized`` (torch.compile's wrapper) gets a call that runs its compiled path
    once verified, and its original module's eager call before and after a failed check.
    """
    module = optimized._orig_mod
    entry = CompiledModule(
        type(module).__name__, sum(p.numel() for p in module.parameters()), by=by
    )
    entry.checking = True
    owner.compiled.append(entry)
    owner.adopted.add(id(optimized))
    owner.remember(entry, module)
    # Compiled again through the checked backend, from the same config (the script's
    # compile is lazy: it has traced nothing yet).
    entry.call = RegionalCall(
        owner.torch.compile(traced_call(owner, module, entry), **owner.torch_kwargs),
        [],
        owner.torch,
    )
    compiled = entry.call
    before = torch_compat.compiled_call_impl(optimized)
    torch_compat.set_compiled_call_impl(optimized, guarded_call(owner, module, compiled, entry))
    owner._ledger.record(
        f"autocompile: verified call of {entry.name} ({id(optimized):x}, {by})",
        lambda: torch_compat.set_compiled_call_impl(optimized, before),
    )
    return entry


def traced_call(owner: AutoCompile, module: Any, entry: CompiledModule) -> Callable[..., Any]:
    """The function dynamo compiles for ``module``: its own code object and name.

    Dynamo keeps compiled entries, and counts its recompile limit, per code
    object: one shared function would make the 9th module compiled run eager.
    """
    is_compiling = owner.torch.compiler.is_compiling

    def traced(*args: Any, **kwargs: Any) -> Any:
        if not is_compiling():  # folded to False in compiled code: runs only eager
            entry.eager_calls += 1
            entry.last_call_eager = True
        return entry.run_eager(module, *args, **kwargs)

    code_name = CODE_NAME.format(len(owner.codes))
    owner.codes[code_name] = entry
    traced.__code__ = traced.__code__.replace(co_name=code_name)
    return traced


def recompiled_call(
    owner: AutoCompile, module: Any, entry: CompiledModule, compiled: Callable[..., Any]
) -> Callable[..., Any]:
    """A fresh compile of ``module`` (whole), for parameters whose requires_grad changed.

    torch 2.9 reuses a graph traced with frozen parameters after they are unfrozen
    (a two-phase fine-tune): no gradients reach them (reproduced with
    ``torch.compile(model)`` alone). A new code object starts a new dynamo entry.
    Its new graphs are checked at their first calls.
    """
    entry.checking, entry.verified, entry.check_started = owner.verify, None, None
    if entry.call is not None and entry.call.groups:
        regions.unmark_regions(entry.call.groups)
    if entry.aot is not None:
        entry.aot.state.reason = "not used after requires_grad of its parameters changed"
    torch = owner.torch
    fresh = torch.compile(traced_call(owner, module, entry), **owner.torch_kwargs)
    entry.call = RegionalCall(fresh, [], torch)
    entry.recompiled = "requires_grad of its parameters changed"
    return entry.call
