"""The call a compiled module runs: eager, verified against eager, or compiled.

Part of the zero-code path (:mod:`.autocompile`); standard library only at import.
"""

from __future__ import annotations

import functools
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from trcomp.runtime import regions
from trcomp.runtime.regions import RegionalCall
from trcomp_container.inprocess import torch_compat
from trcomp_container.inprocess.compiled import (
    CODE_NAME,
    MAX_SIGNATURES,
    REASON_CHARS,
    CompiledModule,
    call_signature,
    trained,
    went_through_compiled,
)
from trcomp_container.inprocess.unrolled import unrolled_loop
from trcomp_container.inprocess.verify import (
    Verdict,
    put_back,
    state_of,
    stateful_argument,
    tensors,
    verify_call,
)

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
"""Calls of one module verified in one round at most (a loop that steps no optimizer)."""
_FAILED = object()


def guarded_call(
    owner: AutoCompile, module: Any, compiled: Callable[..., Any], entry: CompiledModule
) -> Callable[..., Any]:
    """The call that ``module(...)`` runs once compiled: eager when it must, verified on its
    first compiled step, compiled after; a compile error runs it eager (``fallback``)."""
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
        if entry.checking:
            return _checked(owner, module, compiled, entry, args, kwargs)
        entry.calls += 1
        entry.last_call_eager = False
        new = owner.verify and _new_signature(entry, call_signature(torch, module, args, kwargs))
        # Its state before the call: a failed compile after a graph break may already
        # have run the forward's first part (BatchNorm's statistics updated), and a new
        # graph is checked from it.
        saved = state_of(torch, module) if entry.calls <= 3 or new else None
        graphs = torch_compat.unique_graphs()
        # The module's own pre-hook does not run on this path (nn.Module calls
        # _compiled_call_impl instead of _call_impl): count the call as the outermost
        # one, so what the compiled code calls is not taken for the script's model
        # (torch 2.14's aot_eager runs the graph as an fx GraphModule, grad disabled).
        owner.depth += 1
        owner.running = entry
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
            owner.running = None
        if out is _FAILED:
            return entry.run_eager(module, *args, **kwargs)
        if owner.verify and torch_compat.unique_graphs() != graphs:
            return _new_graph(owner, module, compiled, entry, (args, kwargs), saved, out)
        return out

    return call


def _new_signature(entry: CompiledModule, signature: tuple[Any, ...]) -> bool:
    """Whether no call before looked like this one (up to :data:`MAX_SIGNATURES` kept)."""
    if len(entry.signatures) >= MAX_SIGNATURES or signature in entry.signatures:
        return False
    entry.signatures.add(signature)
    return True


def _look_for_compiled_code(entry: CompiledModule, out: Any) -> None:
    """Count whether this call's output went through compiled code (its first calls only)."""
    first = next((t for t in tensors(out) if getattr(t, "requires_grad", False)), None)
    found = went_through_compiled(first, torch_compat.COMPILED_BACKWARD_NODE)
    if found is not None:
        entry.graphs_seen = (entry.graphs_seen or 0) + int(found)


def _new_graph(
    owner: AutoCompile,
    module: Any,
    compiled: Callable[..., Any],
    entry: CompiledModule,
    call: tuple[tuple[Any, ...], dict[str, Any]],
    saved: tuple[list[Any], list[Any]] | None,
    out: Any,
) -> Any:
    """The call compiled a new graph after the module's first check: a new check begins.

    With the state from before the call (a call unlike any before), this call is the
    first checked one and the script gets eager's output; without it (a graph no change
    of the call's inputs or modes explains) the check begins at the next call. In a job
    of several ranks the new graph runs unchecked: one rank checking alone would run the
    module's collectives (DDP's buffer broadcast, FSDP's all-gathers) twice on that rank
    only.
    """
    if owner.ranks > 1:
        entry.unchecked_graphs += 1
        return out
    entry.rechecks += 1
    entry.checking, entry.verified = True, None
    entry.check_started = owner.steps
    if saved is None:
        return out
    args, kwargs = call
    return _checked(owner, module, compiled, entry, args, kwargs, ran=(saved, out))


def _checked(
    owner: AutoCompile,
    module: Any,
    compiled: Callable[..., Any],
    entry: CompiledModule,
    args: tuple[Any, ...],
    kwargs: dict[str, Any],
    ran: tuple[tuple[list[Any], list[Any]], Any] | None = None,
) -> Any:
    """One call verified against eager; the script gets eager's output.

    Before the module's first: a forward that would unroll a long loop is not compiled at
    all (:mod:`.unrolled`). After a call that failed its check, the round's other calls
    run eager only: the module stays eager whatever they find. ``ran``: the compiled
    forward already ran (:func:`.verify.verify_call`).
    """
    verdict = Verdict()
    first = not entry.verdicts
    if first and entry.check_started is None:
        entry.check_started = owner.steps
    census = first and entry.verified_calls == 0
    failed = any(v.problem for v in entry.verdicts)
    entry.verdicts.append(verdict)
    started = time.perf_counter()
    owner.depth += 1
    owner.running = entry
    try:
        eager = functools.partial(entry.run_eager, module)
        if census and entry.block_of is not None:  # an FSDP2 block: called by its model
            verdict.problem = stateful_argument(args, kwargs)
        if census and verdict.problem is None:
            verdict.problem = unrolled_loop(owner.torch, module, eager, args, kwargs)
        if failed or verdict.problem:
            if ran is not None:
                put_back(owner.torch, module, ran[0])
            return eager(*args, **kwargs)
        return verify_call(
            owner.torch,
            module,
            (compiled, eager),
            args,
            kwargs,
            verdict=verdict,
            compare_random=owner.compare_random,
            catch=owner.fallback_eager,
            ran=ran,
        )
    finally:
        owner.depth = max(0, owner.depth - 1)
        owner.running = None
        entry.verified_calls += 1
        entry.verify_s += time.perf_counter() - started
        if len(entry.verdicts) >= MAX_CHECKED_CALLS:
            owner.conclude()  # a loop without an optimizer: do not check forever


def adopt(owner: AutoCompile, optimized: Any) -> CompiledModule:
    """Check a model the script compiled through ``trcomp.runtime.compile`` as the hook's own.

    ``optimized`` (torch.compile's wrapper) gets a call that runs its compiled path
    once verified, and its original module's eager call before and after a failed check.
    """
    module = optimized._orig_mod
    entry = CompiledModule(
        type(module).__name__, sum(p.numel() for p in module.parameters()), by=BY_RUNTIME
    )
    entry.checking = True
    owner.compiled.append(entry)
    owner.adopted.add(id(optimized))

    def compiled(*args: Any, **kwargs: Any) -> Any:
        return optimized._call_impl(*args, **kwargs)

    before = torch_compat.compiled_call_impl(optimized)
    torch_compat.set_compiled_call_impl(optimized, guarded_call(owner, module, compiled, entry))
    owner._ledger.record(
        f"autocompile: verified call of {entry.name} ({id(optimized):x}, {BY_RUNTIME})",
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
    A model the script compiled (``trcomp.runtime.compile``) keeps its call and is
    checked again.
    """
    entry.checking, entry.verified = owner.verify, None
    if entry.by == BY_RUNTIME:
        entry.recompiled = "requires_grad of its parameters changed: checked again"
        return compiled
    if entry.call is not None and entry.call.groups:
        regions.unmark_regions(entry.call.groups)
    if entry.aot is not None:
        entry.aot.state.reason = "not used after requires_grad of its parameters changed"
    torch = owner.torch
    fresh = torch.compile(traced_call(owner, module, entry), **owner.compile_kwargs)
    entry.call = RegionalCall(fresh, [], torch)
    entry.recompiled = "requires_grad of its parameters changed"
    return entry.call
