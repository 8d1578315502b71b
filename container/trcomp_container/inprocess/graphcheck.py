"""Verified compile, graph by graph: each captured graph checked against eager on copies.

The hook's modules compile through :class:`CheckedBackend`: the backend the
config asks for (inductor, or any other), wrapped. Each graph dynamo captures
becomes a :class:`Region`; at its first call in each module it is checked
before the script's call runs it:

- the captured graph (an FX graph of torch operations, the same function the
  compiled code stands for) runs eager, then the compiled graph runs, each on
  its own copies of the call's inputs (parameters aliased, detached, unless the
  graph changes a tensor in place; every other tensor cloned), each followed by
  a backward with a fixed upstream gradient into those copies; torch's random
  generators are put back after each side;
- outputs, gradients, the inputs each side changed in place and the random
  state after the call are compared (:func:`.verify.compare_sides`);
- then the graph runs once for the script: compiled when it matched, eager
  (the captured graph) when it did not, so no step ever trains on a compiled
  result that differed.

The script's code runs once: a captured graph is a pure function of its inputs
(dynamo replays the Python side effects it recorded after the graph, once;
AOTAutograd turns changes to inputs into writes to them, here to copies), and
the check's backward runs on its own copies, never through the script's
autograd graph, its hooks or its ``retain_graph``. What it cannot see is
dynamo's capture itself (its guards and replayed side effects), which runs the
same in a plain ``torch.compile``; docs/runtime.md says so.

A graph whose check failed runs eager from then on; the module's verdict is
taken at the end of the step (:meth:`.autocompile.AutoCompile.conclude`), after
which the whole module runs eager. Standard library only at import.
"""

from __future__ import annotations

import copy
import operator
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from trcomp_container.inprocess import torch_compat
from trcomp_container.inprocess.regionfn import run_region
from trcomp_container.inprocess.verify import (
    Side,
    Verdict,
    autocast_dtype,
    compare_sides,
    is_tensor,
    put_rng,
    rng_state,
    short,
    strided_copy,
    tensors,
    vjp,
)

if TYPE_CHECKING:
    from trcomp_container.inprocess.autocompile import AutoCompile
    from trcomp_container.inprocess.compiled import CompiledModule

__all__ = ["CheckedBackend", "Region", "checked_kwargs"]

_IN_PLACE_OPERATORS = frozenset(
    getattr(operator, name)
    for name in (
        *("setitem", "iadd", "isub", "imul", "itruediv", "ifloordiv", "ipow", "imod"),
        *("iand", "ior", "ixor", "ilshift", "irshift", "imatmul"),
    )
)
_COLLECTIVES = ("c10d", "collective", "all_reduce", "all_gather", "reduce_scatter")


def checked_kwargs(owner: AutoCompile, compile_kwargs: dict[str, Any]) -> dict[str, Any]:
    """``torch.compile`` arguments that compile through a :class:`CheckedBackend` wrapping
    the backend (with its mode and options) that ``compile_kwargs`` name."""
    kwargs = dict(compile_kwargs)
    inner = torch_compat.backend_of(
        owner.torch,
        kwargs.pop("backend", "inductor"),
        kwargs.pop("mode", None),
        kwargs.pop("options", None),
        kwargs.get("dynamic"),
    )
    kwargs["backend"] = CheckedBackend(owner, inner)
    return kwargs


class CheckedBackend:
    """A dynamo backend: ``inner``'s compile of each graph, as a :class:`Region`."""

    def __init__(self, owner: AutoCompile, inner: Callable[..., Any]) -> None:
        self.owner = owner
        self.inner = inner

    def __call__(self, gm: Any, example_inputs: list[Any]) -> Callable[..., Any]:
        # Inductor's passes rewrite the graph module in place: eager runs a copy of the
        # graph (attributes shared; parameters are inputs, not attributes, on torch >= 2.5).
        torch = self.owner.torch
        eager = torch.fx.GraphModule(gm, copy.deepcopy(gm.graph))
        facts = _facts(gm)
        compiled = self.inner(gm, example_inputs)
        return Region(self.owner, eager, compiled, facts, self.owner.running)


@dataclass(frozen=True)
class _Facts:
    """What a captured graph's nodes say, read once when it is compiled."""

    in_place: bool
    """It changes a tensor in place (an ``op_``, ``out=``, ``inplace=True``, ``x[i] = y``)."""
    collectives: bool
    """It runs a collective: checking would run it again on this rank only."""
    random: bool
    """It draws random numbers (a recomputation puts the generators' state back first)."""
    higher_order: bool
    """It calls a higher-order operator (a nested compile region)."""


def _facts(gm: Any) -> _Facts:
    in_place = collectives = random = higher_order = False
    for node in gm.graph.nodes:
        if node.op not in ("call_function", "call_method"):
            continue
        higher_order = higher_order or torch_compat.is_higher_order_op(node.target)
        name = node.target if isinstance(node.target, str) else getattr(node.target, "__name__", "")
        text = f"{name} {node.target}"
        mutating = (
            (name.endswith("_") and not name.endswith("__"))
            or node.target in _IN_PLACE_OPERATORS
            or "out" in node.kwargs
            or node.kwargs.get("inplace") is True
        )
        in_place = in_place or mutating
        collectives = collectives or any(word in text for word in _COLLECTIVES)
        random = random or any(word in text for word in ("rand", "dropout", "bernoulli"))
        random = random or any(word in text for word in ("normal", "uniform", "multinomial"))
    return _Facts(in_place, collectives, random, higher_order)


class Region:
    """One captured graph, compiled: what dynamo calls in its place.

    ``entry``: the module whose compiled call was running when the graph was compiled.
    """

    def __init__(
        self,
        owner: AutoCompile,
        eager: Callable[..., Any],
        compiled: Callable[..., Any],
        facts: _Facts,
        entry: CompiledModule | None,
    ) -> None:
        self.owner = owner
        self.eager = eager
        self._compiled = compiled
        self.facts = facts
        self.entry = entry
        self.checked: set[int] = set()
        """The modules (ids of their entries) this graph was checked in."""
        self.wrong: str | None = None
        """What its check found; the graph runs eager from then on."""
        self.mutated: set[int] = set()
        """Positions of inputs a call changed in place (seen by the check)."""
        self.protect: list[int] = []
        """Positions of inputs passed to the compiled graph as copies (:meth:`_check`)."""
        self.wrap: bool | None = None
        """Whether its calls run inside :func:`.regionfn.run_region`'s node (None: not
        decided before its first call)."""

    def on_double_backward(self) -> None:
        """A backward with ``create_graph=True`` went through it (:mod:`.regionfn`)."""
        entry = self.entry or self.owner.sole_entry
        if entry is not None:
            self.owner.double_backward(entry)

    def compiled(self, *args: Any) -> Any:
        """The compiled graph's call, as dynamo makes it (positional arguments: torch 2.9's
        and 2.14's backends take them so, whatever their ``_boxed_call`` says)."""
        if self.protect:
            torch = self.owner.torch
            args = tuple(
                strided_copy(torch, arg) if i in self.protect else arg for i, arg in enumerate(args)
            )
        return self._compiled(*args)

    def __call__(self, *args: Any) -> Any:
        owner = self.owner
        entry = owner.running or self.entry or owner.sole_entry
        if self.wrong is not None:
            if entry is not None and id(entry) not in self.checked:
                # Another module runs the same graph (FSDP2 blocks of one class): its
                # verdict is the graph's.
                self.checked.add(id(entry))
                if entry.failed is None and (entry.checking or entry.verified is None):
                    entry.checking = True
                    entry.verdicts.append(Verdict(problem=self.wrong))
                    if entry.check_started is None:
                        entry.check_started = owner.steps
            return self.eager(*args)
        if entry is not None and owner.verify and id(entry) not in self.checked:
            self.checked.add(id(entry))
            if self._should_check(entry):
                return self._check(entry, args)
        return run_region(owner.torch, self, args, checking=bool(entry and entry.checking))

    def _should_check(self, entry: CompiledModule) -> bool:
        """Whether this first call in ``entry`` is checked; a new check round begins."""
        if entry.failed is not None:
            return False
        if self.facts.higher_order:
            # A nested compile region's invoke_subgraph has no eager backward outside a
            # compile, and a second trace of it (aot_eager) shares its subgraph's cache
            # with inductor's: there is no eager reference to check it against.
            entry.unchecked_graphs += 1
            entry.unchecked_reason = (
                "a graph with nested compile regions (regional=True) has no eager "
                "reference to check it against"
            )
            return False
        if self.facts.collectives:
            entry.unchecked_graphs += 1
            entry.unchecked_reason = (
                "a graph runs collectives: checking would run them on one rank only"
            )
            return False
        if entry.verified is not None and not entry.checking:
            if self.owner.ranks > 1:
                # A new graph after the ranks agreed: one rank checking alone would start
                # a verdict round that the other ranks never join.
                entry.unchecked_graphs += 1
                return False
            entry.rechecks += 1
            entry.checking, entry.verified = True, None
        if entry.check_started is None:
            entry.check_started = self.owner.steps
        return True

    def _check(self, entry: CompiledModule, args: tuple[Any, ...]) -> Any:
        torch = self.owner.torch
        verdict = Verdict()
        entry.verdicts.append(verdict)
        started = time.perf_counter()
        compiling = torch_compat.backward_compile_seconds()
        before = rng_state(torch)
        sides: list[Side] = []
        try:
            for run, name in ((self.eager, "eager"), (self.compiled, "compiled")):
                try:
                    sides.append(self._side(run, args))
                except Exception as exc:  # either side failing is what the check reports
                    if name == "compiled" and not self.owner.fallback_eager:
                        raise
                    what = (
                        "the compiled module failed"
                        if name == "compiled"
                        else ("the captured graph failed to run eager on copies of its inputs")
                    )
                    verdict.problem = short(f"{what}: {type(exc).__name__}: {exc}")
                    break
                finally:
                    put_rng(torch, before)
            if verdict.problem is None:
                verdict.problem = compare_sides(
                    torch,
                    sides[0],
                    sides[1],
                    before=before,
                    names=self._names(entry, args),
                    compare_random=self.owner.compare_random,
                    precision=autocast_dtype(torch),
                )
        finally:
            compile_s = torch_compat.backward_compile_seconds() - compiling
            entry.verified_calls += 1
            entry.verify_compile_s += compile_s
            entry.verify_s += max(0.0, time.perf_counter() - started - compile_s)
        if len(sides) == 2:
            # Inputs the compiled graph keeps for its backward where eager keeps a copy
            # (AOTAutograd saves an input its graph only cloned): a later in-place write
            # to one (a MoCo queue overwritten by the forward's next graph) would fail the
            # compiled backward. They reach the compiled graph as copies from now on:
            # state that needs no gradient (a queue, a buffer); an activation that needs
            # one (GPT-2's logits, 1.6 GB in bf16 on a GPU) is not written in place after
            # the graph that reads it, and copying it every step would cost its size.
            self.protect = sorted(
                index
                for index in sides[1].kept - sides[0].kept - self.mutated
                if not (is_tensor(args[index]) and args[index].requires_grad)
            )
        sides.clear()  # the copies and their results go before the script's call runs
        if verdict.problem is not None:
            self.wrong = verdict.problem
            return self.eager(*args)
        return run_region(torch, self, args, checking=True)

    def _side(self, run: Callable[..., Any], args: tuple[Any, ...]) -> Side:
        """One side of the check: ``run`` on copies of ``args``, and a backward into them."""
        torch = self.owner.torch
        copies = [self._copy(torch, arg) for arg in args]
        versions = [getattr(arg, "_version", None) for arg in copies]
        storages = {
            _storage(arg): index
            for index, arg in enumerate(copies)
            if is_tensor(arg) and not isinstance(args[index], torch.nn.Parameter)
        }
        kept: set[int] = set()

        def pack(tensor: Any) -> Any:
            found = storages.get(_storage(tensor))
            if found is not None:
                kept.add(found)
            return tensor

        with torch.autograd.graph.saved_tensors_hooks(pack, lambda tensor: tensor):
            out = run(*copies)
        flat = list(tensors(out))
        wanted = [arg for arg in copies if is_tensor(arg) and arg.requires_grad]
        grads = vjp(torch, flat, wanted)
        # Changed in place: a new version, or other values than the input's (a kernel such
        # as batch_norm's writes its running statistics without a new version).
        changed = {
            index
            for index, (arg, version) in enumerate(zip(copies, versions, strict=True))
            if version is not None
            and (arg._version != version or (arg is not args[index] and _moved(arg, args[index])))
        }
        self.mutated |= changed
        return Side(
            outputs=[t.detach() for t in flat],
            grads=grads,
            grad_positions=[i for i, arg in enumerate(copies) if any(arg is w for w in wanted)],
            changed={index: copies[index].detach() for index in changed},
            rng=rng_state(torch),
            kept=kept,
        )

    def _copy(self, torch: Any, arg: Any) -> Any:
        """A copy of one input for the check: a tensor the script never sees changed."""
        if not is_tensor(arg):
            return arg
        keep = isinstance(arg, torch.nn.Parameter) and not self.facts.in_place
        copied = arg.detach() if keep else strided_copy(torch, arg)
        if arg.requires_grad:
            copied.requires_grad_(True)
        return copied

    def _names(self, entry: CompiledModule, args: tuple[Any, ...]) -> dict[int, str]:
        """Input positions named by the module's parameter and buffer names."""
        module = self.owner.module_of(entry)
        if module is None:
            return {}
        found = {id(tensor): name for name, tensor in module.named_parameters()}
        found.update({id(tensor): f"buffer {name}" for name, tensor in module.named_buffers()})
        return {i: found[id(arg)] for i, arg in enumerate(args) if id(arg) in found}


def _moved(copy: Any, original: Any) -> bool:
    """Whether a copy's values are no longer its original's (NaN equal to NaN)."""
    if copy.shape != original.shape or copy.dtype != original.dtype:
        return True
    same = copy.detach() == original.detach()
    if copy.is_floating_point() or copy.is_complex():
        same = same | (copy.detach().isnan() & original.detach().isnan())
    return not bool(same.all())


def _storage(tensor: Any) -> int:
    try:
        return int(tensor.untyped_storage().data_ptr())
    except (RuntimeError, NotImplementedError):  # a tensor without storage (a subclass)
        return id(tensor)
