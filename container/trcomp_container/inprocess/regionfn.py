"""A compiled graph's call that a double backward cannot break.

torch's compiled backward (AOTAutograd) cannot build a graph of its own: a
backward through it with ``create_graph=True`` (a gradient penalty, MAML,
higher-order gradients) fails, in the script's second backward, with "does not
currently support double backward", where eager trains on. A penalty that
starts after the check (step 6 of a WGAN-GP schedule) would fail the job.

So a checked graph's training calls that take an input needing a gradient
other than a parameter run inside one autograd node of ours (:func:`run_region`):
its forward runs the compiled graph on detached aliases of
the inputs; its backward, in the usual case, takes the compiled backward into
those aliases; when the engine asks for a graph (grad mode on inside a backward
runs only under ``create_graph=True``) it recomputes the captured graph eagerly
from the call's inputs, with the random state and autocast of the forward, as
activation checkpointing recomputes a block, and differentiates that. The step
gets eager's gradients, built as a graph the second backward can go through,
and the module runs eager from its next call (the summary says why).
Every other training call (a whole model: data and parameters) runs as dynamo
makes it, and its compiled node gets a hook that does the same under
``create_graph=True`` (:func:`_watch`): a penalty on the parameters alone that
starts after the check.

The node's name holds ``CompiledFunction``, as AOTAutograd's does: the hook's
count of calls that went through compiled code reads it.
Standard library only at import.
"""

from __future__ import annotations

import contextlib
import functools
from typing import TYPE_CHECKING, Any

from trcomp_container.inprocess import torch_compat
from trcomp_container.inprocess.verify import is_tensor, put_rng, rng_state

if TYPE_CHECKING:
    from trcomp_container.inprocess.graphcheck import Region

__all__ = ["run_region"]


def run_region(torch: Any, region: Region, args: tuple[Any, ...], *, checking: bool) -> Any:
    """``region``'s compiled call, inside the node of :func:`_node` when a backward through
    it may ask for a graph: it trains and takes a tensor that requires a gradient and is
    no parameter (the batch of a gradient penalty, MAML's fast weights, an activation of
    an earlier graph). Decided at its first call: dynamo guards grad mode and each input's
    ``requires_grad``, so every call of one graph decides the same. The node cost 0.7 ms
    per forward and 2.2 ms per forward and backward for a call of 151 inputs on this
    project's 2-core machine under load, which a whole-model graph, whose inputs are the
    data and its parameters, does not pay. While its module is being checked
    (``checking``), every training call runs in the node: a double backward through the
    parameters alone (MAML's inner step, a penalty on the parameters' gradients) from the
    first compiled step on is seen then."""
    if checking and torch.is_grad_enabled():
        return _node(torch).apply(region, *args)
    if region.wrap is None:
        region.wrap = torch.is_grad_enabled() and any(
            is_tensor(arg) and arg.requires_grad and not isinstance(arg, torch.nn.Parameter)
            for arg in args
        )
    if not region.wrap:
        outs = region.compiled(*args)
        if torch.is_grad_enabled():
            _watch(torch, region, args, outs)
        return outs
    return _node(torch).apply(region, *args)


def _watch(torch: Any, region: Region, args: tuple[Any, ...], outs: Any) -> None:
    """A double backward that starts after the check through a call outside the node: a
    gradient penalty on the parameters alone, from step 6. The call's compiled node
    (AOTAutograd's ``CompiledFunction``) gets a hook that does nothing in a plain backward
    (grad mode is off there) and, under ``create_graph=True``, replaces the gradients the
    compiled backward gave (which the second backward cannot go through) by eager's,
    recomputed from the call's inputs, as the node of :func:`run_region` does. Costs a
    hook per output and one per call, and the inputs held until the graph is freed."""
    flat = [(index, out) for index, out in enumerate(outs) if is_tensor(out) and out.requires_grad]
    node = next(
        (found for _, out in flat if (found := _compiled_node(out.grad_fn)) is not None), None
    )
    if node is None:
        return
    late = _Late(torch, region, args, [index for index, _ in flat])
    late.edges = node.next_functions
    for position, (_, out) in enumerate(flat):
        out.register_hook(functools.partial(late.upstream, position))
    node.register_hook(late.on_backward)


def _compiled_node(grad_fn: Any) -> Any:
    """AOTAutograd's node behind an output: its ``grad_fn``, or the one a view of an output
    (an alias torch regenerates outside the graph) leads to."""
    for node in (grad_fn, *(fn for fn, _ in getattr(grad_fn, "next_functions", ()))):
        if node is not None and "CompiledFunction" in type(node).__name__:
            return node
    return None


class _Late:
    """What :func:`_watch`'s hooks need: the call's inputs, random and autocast state, the
    inputs it changes in place as they were, and the gradients that reached its outputs."""

    def __init__(self, torch: Any, region: Region, args: tuple[Any, ...], positions: list[int]):
        self.torch, self.region, self.args, self.positions = torch, region, args, positions
        self.rng, self.autocast, self.before = _recompute_state(torch, region, args)
        self.grads: list[Any] = [None] * len(positions)
        self.edges: tuple[tuple[Any, int], ...] = ()

    def upstream(self, position: int, grad: Any) -> None:
        self.grads[position] = grad

    def on_backward(self, grad_inputs: tuple[Any, ...], _grad_outputs: Any) -> Any:
        torch = self.torch
        upstream, self.grads = self.grads, [None] * len(self.positions)
        if not torch.is_grad_enabled():  # a plain backward: the compiled one's gradients
            return None
        node_inputs = self.args_of(grad_inputs)
        wanted = sorted({index for index in node_inputs if index is not None})
        found = dict(zip(wanted, _recompute(torch, self, wanted, upstream), strict=True))
        return tuple(
            grad if index is None else found.get(index)
            for grad, index in zip(grad_inputs, node_inputs, strict=True)
        )

    def args_of(self, grad_inputs: tuple[Any, ...]) -> list[int | None]:
        """For each input edge of the compiled node, the position of the call's input it
        leads to (a parameter's accumulator, or the node that made the input); None where
        none does (that edge keeps the compiled gradient)."""
        found: list[int | None] = []
        for fn, nr in self.edges[: len(grad_inputs)]:
            match = None
            for index, arg in enumerate(self.args):
                if not (is_tensor(arg) and arg.requires_grad) or fn is None:
                    continue
                if (arg.grad_fn is None and getattr(fn, "variable", None) is arg) or (
                    arg.grad_fn is fn and arg.output_nr == nr
                ):
                    match = index
                if match is not None:
                    break
            found.append(match)
        return found + [None] * (len(grad_inputs) - len(found))


@functools.cache
def _node(torch: Any) -> Any:
    class CompiledFunctionOrEager(torch.autograd.Function):  # type: ignore[misc, name-defined]
        """Compiled forward and backward; an eager recomputation under ``create_graph``."""

        @staticmethod
        def forward(ctx: Any, region: Region, *args: Any) -> Any:
            leaves = tuple(
                arg.detach().requires_grad_(arg.requires_grad) if is_tensor(arg) else arg
                for arg in args
            )
            ctx.region, ctx.args, ctx.leaves = region, args, leaves
            ctx.rng, ctx.autocast, ctx.before = _recompute_state(torch, region, args)
            with torch.enable_grad():
                outs = region.compiled(*leaves)
            outputs = tuple(outs)
            trained = [
                index for index, out in enumerate(outputs) if is_tensor(out) and out.requires_grad
            ]
            ctx.positions = trained
            # Kept as they are, not saved: only their place in the compiled graph is read, and
            # the script may change what it got in place (HF Trainer's `loss *= ...`), which
            # eager allows and a saved tensor's version check would refuse.
            ctx.outputs = tuple(outputs[index] for index in trained)
            results = tuple(out.detach() if is_tensor(out) else out for out in outputs)
            ctx.mark_non_differentiable(
                *(
                    result
                    for index, result in enumerate(results)
                    if is_tensor(result) and index not in trained
                )
            )
            return results

        @staticmethod
        def backward(ctx: Any, *grads: Any) -> Any:
            wanted = [
                index
                for index, leaf in enumerate(ctx.leaves)
                if is_tensor(leaf) and leaf.requires_grad
            ]
            upstream = [grads[index] for index in ctx.positions]
            if torch.is_grad_enabled():  # only under create_graph=True
                found = _recompute(torch, ctx, wanted, upstream)
            else:
                outputs = ctx.outputs
                pairs = [(o, g) for o, g in zip(outputs, upstream, strict=True) if g is not None]
                found = (
                    torch.autograd.grad(
                        [o for o, _ in pairs],
                        [ctx.leaves[index] for index in wanted],
                        [g for _, g in pairs],
                        # The script's own retain_graph (PCGrad's second backward); the
                        # compiled backward's donated buffers allow no other.
                        retain_graph=torch_compat.current_graph_task_keeps_graph(),
                        allow_unused=True,
                    )
                    if pairs
                    else [None] * len(wanted)
                )
            result: list[Any] = [None] * len(ctx.leaves)
            for index, grad in zip(wanted, found, strict=True):
                result[index] = grad
            return (None, *result)

    return CompiledFunctionOrEager


def _recompute_state(
    torch: Any, region: Region, args: tuple[Any, ...]
) -> tuple[Any, list[tuple[str, Any]], dict[int, Any]]:
    """What :func:`_recompute` starts from, taken at the call: the random state (graphs
    that draw random numbers), the autocast regions, and the inputs the graph changes in
    place, as they were before it."""
    rng = rng_state(torch) if region.facts.random else None
    before = {
        index: args[index].detach().clone()
        for index in region.mutated
        if index < len(args) and is_tensor(args[index])
    }
    return rng, _autocast_state(torch), before


def _recompute(torch: Any, ctx: Any, wanted: list[int], upstream: list[Any]) -> Any:
    """Eager's gradients of the call's inputs, as a graph: the captured graph run again from
    the call's inputs (those it changes in place from copies taken before it)."""
    region: Region = ctx.region
    region.on_double_backward()
    now = rng_state(torch)
    if ctx.rng is not None:
        put_rng(torch, ctx.rng)
    try:
        args = [
            ctx.before[index].requires_grad_(arg.requires_grad) if index in ctx.before else arg
            for index, arg in enumerate(ctx.args)
        ]
        with contextlib.ExitStack() as stack:
            for device, dtype in ctx.autocast:
                stack.enter_context(torch.autocast(device, dtype=dtype))
            outs = tuple(region.eager(*args))
        pairs = [
            (outs[position], grad)
            for position, grad in zip(ctx.positions, upstream, strict=True)
            if grad is not None and outs[position].requires_grad
        ]
        if not pairs:
            return [None] * len(wanted)
        return torch.autograd.grad(
            [o for o, _ in pairs],
            [args[index] for index in wanted],
            [g for _, g in pairs],
            create_graph=True,
            allow_unused=True,
        )
    finally:
        put_rng(torch, now)


def _autocast_state(torch: Any) -> list[tuple[str, Any]]:
    """The autocast regions the forward ran in: (device, dtype) for each one enabled."""
    found = []
    for device in ("cuda", "cpu"):
        with contextlib.suppress(RuntimeError, TypeError):
            if torch.is_autocast_enabled(device):
                found.append((device, torch.get_autocast_dtype(device)))
    return found
