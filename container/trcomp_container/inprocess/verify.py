"""Verified compile: what a check compares, and how closely compiled must match eager.

The check itself runs graph by graph inside the backend (:mod:`.graphcheck`):
each side of it, eager and compiled, leaves a :class:`Side` (outputs, gradients
of the inputs, the inputs it changed in place, the random state after), and
:func:`compare_sides` says how they differ. Pass: the compiled path carries on.
A difference beyond the tolerance, or any error of the compiled side (forward,
backward, a backward compile error, a recursion error): the graph runs eager at
once, the module runs eager for the rest of the job once its round ends, and
the summary says what differed and by how much.

The upstream gradient is drawn from its own generator (seeded, never the
script's): any gradient checks the same backward, and one known before the
script's backward runs lets both sides be compared at once.

Tolerance, measured as the largest difference over the largest magnitude of
eager's tensor: fp32 1e-3 (inductor reorders sums; what it changed on our
reference models was under 1e-5), bf16 5e-2 and fp16 1e-2 (8 and 11 bits of
mantissa: one rounding step is 4e-3 and 5e-4 of the value, and a fused kernel
may round at other points than eager does), each with a small absolute floor
for tensors that are nearly zero.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

from trcomp_container.inprocess.speedup.exchange import exchange

__all__ = [
    "TOLERANCES",
    "Side",
    "Verdict",
    "agree_verdicts",
    "autocast_dtype",
    "compare_sides",
    "is_tensor",
    "put_back",
    "put_rng",
    "rng_state",
    "short",
    "state_of",
    "strided_copy",
    "tensors",
    "vjp",
]

TOLERANCES = {"float32": (1e-3, 1e-6), "float64": (1e-6, 1e-9), "bfloat16": (5e-2, 1e-3)}
"""dtype -> (relative to the largest magnitude, absolute floor); others use float16's."""
_FLOAT16 = (1e-2, 1e-4)
_SEED = 20261203
_REASON_CHARS = 500


@dataclass
class Verdict:
    """What one checked call found: None when compiled matched eager."""

    problem: str | None = None
    seconds: float = 0.0


def agree_verdicts(local: list[str | None], round_: int) -> list[str | None]:
    """Every rank's verdicts, module by module: a module that failed on one rank fails on all
    (through the c10d store, as the speed-up figures)."""
    ranks = exchange(local, topic=f"verify/{round_}")
    if len(ranks) < 2:
        return local
    agreed: list[str | None] = []
    for index, problem in enumerate(local):
        found = problem
        for rank, theirs in enumerate(ranks):
            if found is None and (theirs is None or index >= len(theirs)):
                found = f"rank {rank} did not report its check"
            elif found is None and theirs[index]:
                found = f"on rank {rank}: {theirs[index]}"
        agreed.append(found)
    return agreed


@dataclass
class Side:
    """One side of a check (:mod:`.graphcheck`): what the graph's call left on its copies."""

    outputs: list[Any]
    grads: list[Any] | None
    """Gradients of the inputs that require them (``grad_positions``); None: no backward."""
    grad_positions: list[int]
    changed: dict[int, Any]
    """Inputs (by position) the call changed in place, as they are after it."""
    rng: list[Any]
    """The random generators' states after the call."""
    kept: set[int] = field(default_factory=set)
    """Inputs (by position, parameters left out) the call saved for its backward as they
    are, not as a copy."""


def compare_sides(
    torch: Any,
    eager: Side,
    compiled: Side,
    *,
    before: list[Any],
    names: dict[int, str],
    compare_random: bool = True,
    precision: str | None = None,
) -> str | None:
    """How the compiled side differs from eager beyond the tolerance; None when it does not.

    ``before``: the random generators' states before either side ran; ``names``: input
    positions by the module's parameter and buffer names (messages only);
    ``compare_random`` False (``fast_random``): a graph that draws random numbers is
    checked only for having run, since its values cannot match.
    """
    drew = not _same_states(torch, before, eager.rng)
    if drew and not compare_random:
        return None
    # First: different random numbers explain every difference that follows.
    if compare_random and not _same_states(torch, eager.rng, compiled.rng):
        return (
            "the compiled module drew its random numbers differently from eager: the "
            "script's random stream (dropout masks, data order) would change"
        )
    if len(compiled.outputs) != len(eager.outputs):
        counts = f"{len(compiled.outputs)} tensors compiled, {len(eager.outputs)} eager"
        return f"the output has {counts}"
    for index, (c, e) in enumerate(zip(compiled.outputs, eager.outputs, strict=True)):
        found = _differs(torch, c, e, precision=precision)
        if found:
            return short(f"output {index} {found}")
    if (compiled.grads is None) != (eager.grads is None):
        return "the backward ran on one side only"
    if compiled.grads is not None and eager.grads is not None:
        # Gradients are compared at the scale of the largest one: a gradient that is zero
        # in exact arithmetic (a bias before a BatchNorm) is rounding noise on both sides,
        # and its own magnitude is no measure.
        scale = max((float(g.abs().max()) for g in eager.grads if g is not None), default=0)
        pairs = zip(eager.grad_positions, compiled.grads, eager.grads, strict=True)
        for position, c, e in pairs:
            name = names.get(position, f"input {position}").removeprefix("buffer ")
            if (c is None) != (e is None):
                return f"the gradient of {name} is missing on one side"
            found = None if c is None else _differs(torch, c, e, scale, precision)
            if found:
                return short(f"the gradient of {name} {found}")
    for position in sorted(set(eager.changed) | set(compiled.changed)):
        name = names.get(position, f"input {position}")
        if (position in eager.changed) != (position in compiled.changed):
            side = "eager" if position in eager.changed else "compiled"
            return f"{name} was changed in place by the {side} call only"
        found = _differs(
            torch, compiled.changed[position], eager.changed[position], precision=precision
        )
        if found:
            return short(f"{name} after the call {found}")
    return None


def _same_states(torch: Any, one: list[Any], other: list[Any]) -> bool:
    return len(one) == len(other) and all(
        bool(torch.equal(a, b)) for a, b in zip(one, other, strict=True)
    )


def _differs(
    torch: Any, compiled: Any, eager: Any, scale: float = 0.0, precision: str | None = None
) -> str | None:
    """How ``compiled`` differs from ``eager`` beyond the tolerance; None when it does not.

    ``scale``: a magnitude to measure against when larger than the tensor's own;
    ``precision``: the autocast dtype the call ran under (its tolerance, when looser).
    """
    if compiled.shape != eager.shape:
        return f"has shape {tuple(compiled.shape)} compiled, {tuple(eager.shape)} eager"
    if compiled.dtype != eager.dtype:
        return f"has dtype {compiled.dtype} compiled, {eager.dtype} eager"
    if not (compiled.is_floating_point() or compiled.is_complex()):
        return None if bool(torch.equal(compiled, eager)) else "differs (exact values)"
    c = compiled.detach().double().cpu()
    e = eager.detach().double().cpu()
    if not bool(torch.equal(torch.isnan(c), torch.isnan(e))):
        return "has NaN where the other has none"
    c, e = torch.nan_to_num(c), torch.nan_to_num(e)
    if c.numel() == 0:
        return None
    dtype = str(eager.dtype).removeprefix("torch.")
    if precision is not None and TOLERANCES.get(precision, _FLOAT16) > TOLERANCES.get(
        dtype, _FLOAT16
    ):
        dtype = f"{precision} (autocast)"
    rel, floor = TOLERANCES.get(dtype.split(" ")[0], _FLOAT16)
    error = float((c - e).abs().max())
    scale = max(float(e.abs().max()), scale)
    if error <= floor + rel * scale:
        return None
    return (
        f"differs by {error:.3g} (against a magnitude of {scale:.3g}; tolerance {rel:g} "
        f"for {dtype})"
    )


def autocast_dtype(torch: Any) -> str | None:
    """The dtype autocast runs the call in (CPU or CUDA), or None without autocast."""
    for device in ("cuda", "cpu"):
        try:
            if torch.is_autocast_enabled(device):
                return str(torch.get_autocast_dtype(device)).removeprefix("torch.")
        except (RuntimeError, TypeError):  # a torch without the device argument
            continue
    return None


def is_tensor(value: Any) -> bool:
    """Whether ``value`` is a tensor (torch is not imported here: what it has, not its type)."""
    return hasattr(value, "detach") and hasattr(value, "shape") and hasattr(value, "_version")


def strided_copy(torch: Any, tensor: Any) -> Any:
    """A copy of ``tensor`` with its strides, detached. A compiled graph asserts its
    inputs' strides, and ``clone()`` makes a tensor that is not dense contiguous: a slice
    of a wider tensor, or inductor's padded outputs on GPUs (GPT-2's logits, 50,257 wide,
    come out with rows of 50,264)."""
    copied = torch.empty_strided(
        tensor.size(), tensor.stride(), dtype=tensor.dtype, device=tensor.device
    )
    return copied.copy_(tensor.detach())


def tensors(value: Any, depth: int = 0) -> Iterator[Any]:
    """The tensors in an output: a tensor, or lists, tuples, dicts and dataclasses of them."""
    if is_tensor(value):
        yield value
    elif depth < 6 and isinstance(value, (list, tuple)):
        for item in value:
            yield from tensors(item, depth + 1)
    elif depth < 6 and isinstance(value, dict):
        for item in value.values():
            yield from tensors(item, depth + 1)
    elif depth < 6 and dataclasses.is_dataclass(value) and not isinstance(value, type):
        for item in dataclasses.fields(value):
            yield from tensors(getattr(value, item.name, None), depth + 1)


def vjp(torch: Any, outputs: list[Any], inputs: list[Any]) -> list[Any] | None:
    """Gradients of ``inputs`` for a fixed upstream gradient; None without a backward.

    The upstream gradient is drawn from its own generator (seeded, never the script's):
    both sides of a check take the same backward.
    """
    differentiable = [t for t in outputs if t.requires_grad and t.is_floating_point()]
    if not differentiable or not inputs:
        return None
    generator = torch.Generator().manual_seed(_SEED)
    upstream = [
        torch.randn(t.shape, generator=generator, dtype=torch.float32).to(
            device=t.device, dtype=t.dtype
        )
        for t in differentiable
    ]
    # retain_graph: the compiled backward is compiled lazily at its first backward, here,
    # and one compiled for a backward that keeps its graph donates no buffers, so the
    # script may take a backward with retain_graph=True later (PCGrad), as it may under
    # a plain torch.compile whose first backward was its own. The graph goes with the
    # outputs, when the check drops them. A backward compiled before (with dynamic
    # shapes) may have donated buffers already: it refuses to keep its graph, before
    # running, and is taken as the script's would be.
    try:
        grads = torch.autograd.grad(
            differentiable, inputs, upstream, retain_graph=True, allow_unused=True
        )
    except RuntimeError as exc:
        if "donated buffer" not in str(exc):
            raise
        grads = torch.autograd.grad(differentiable, inputs, upstream, allow_unused=True)
    return [None if grad is None else grad.detach() for grad in grads]


def _buffers(torch: Any, module: Any) -> list[Any]:
    with torch.no_grad():
        return [buffer.detach().clone() for buffer in module.buffers()]


def rng_state(torch: Any) -> list[Any]:
    """torch's default generator's state, and each initialized CUDA device's."""
    states = [torch.random.get_rng_state()]
    if torch.cuda.is_available() and torch.cuda.is_initialized():
        states.extend(torch.cuda.get_rng_state_all())
    return states


def state_of(torch: Any, module: Any) -> tuple[list[Any], list[Any]]:
    """The module's buffers and the random generators' states: what a call may change."""
    return _buffers(torch, module), rng_state(torch)


def put_back(torch: Any, module: Any, state: tuple[list[Any], list[Any]]) -> None:
    """Put back what :func:`state_of` took."""
    buffers, rng = state
    with torch.no_grad():
        for buffer, value in zip(module.buffers(), buffers, strict=False):
            buffer.copy_(value)
    put_rng(torch, rng)


def put_rng(torch: Any, rng: list[Any]) -> None:
    """Put back the generators' states :func:`rng_state` took."""
    torch.random.set_rng_state(rng[0])
    if len(rng) > 1:
        torch.cuda.set_rng_state_all(rng[1:])


def short(text: str) -> str:
    return " ".join(text.split())[:_REASON_CHARS]
