"""Verified compile: a compiled module carries training only after it computed what eager does.

For every module the zero-code path compiles, the calls of its first compiled
step (and again after it is compiled afresh) are checked: the compiled forward
runs first, from the step's parameters, buffers and random state, and its
backward is taken with a fixed upstream gradient; then the buffers and the
random state are put back and the eager forward runs, whose output the script
gets (the step continues on eager's result), and its backward is taken with the
same upstream gradient (``retain_graph``: the script's own backward still runs).
Outputs, parameter gradients, buffer updates and the random generator's state
after the call are compared.

Pass: the compiled path carries on from the next step. A difference beyond the
tolerance, or any error of the compiled side (forward, backward, a backward
compile error, a recursion error): the module runs eager for the rest of the
job, and the summary says what differed and by how much. A backward through the
module with ``create_graph=True`` (a gradient penalty, higher-order gradients)
seen while it is checked keeps it eager too: torch's compiled backward does not
support double backward.

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
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

from trcomp_container.inprocess.speedup.exchange import exchange

__all__ = [
    "TOLERANCES",
    "Verdict",
    "agree_verdicts",
    "autocast_dtype",
    "put_back",
    "state_of",
    "stateful_argument",
    "tensors",
    "verify_call",
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


def verify_call(
    torch: Any,
    module: Any,
    calls: tuple[Callable[..., Any], Callable[..., Any]],
    args: tuple[Any, ...],
    kwargs: dict[str, Any],
    *,
    verdict: Verdict,
    compare_random: bool = True,
    catch: bool = True,
    ran: tuple[tuple[list[Any], list[Any]], Any] | None = None,
) -> Any:
    """Run ``module``'s call both ways; return eager's output and fill in ``verdict``.

    ``calls``: (the compiled call, the eager call) of ``module``.

    ``compare_random``: False (``fast_random``) checks a module that draws random numbers
    only for running, since its values cannot match.
    ``catch``: an error of the compiled side is a verdict (``fallback="eager"``); False
    lets it fail the job (``fallback="fail"``).
    ``ran``: the compiled side's forward already ran: (:func:`state_of` before it, its
    output); its backward and the eager side run here.
    """
    compiled, eager = calls
    params = [param for param in module.parameters() if param.requires_grad]
    before = state_of(torch, module) if ran is None else ran[0]
    compiled_side: tuple[list[Any], list[Any] | None, list[Any], Any] | None = None
    try:
        out = compiled(*args, **kwargs) if ran is None else ran[1]
        flat = list(tensors(out))
        grads = _vjp(torch, flat, params, retain=False)
        compiled_side = (
            [t.detach() for t in flat],
            grads,
            _buffers(torch, module),
            _rng(torch),
        )
    except Exception as exc:  # any failure of the compiled side is what the check is for
        if not catch:
            raise
        verdict.problem = _short(f"the compiled module failed: {type(exc).__name__}: {exc}")
    finally:
        put_back(torch, module, before)
    out = eager(*args, **kwargs)
    flat = list(tensors(out))
    _watch_double_backward(torch, flat, verdict)
    if compiled_side is None:
        return out
    outputs_c, grads_c, buffers_c, rng_c = compiled_side
    precision = autocast_dtype(torch)
    drew = not all(bool(torch.equal(a, b)) for a, b in zip(before[1], _rng(torch), strict=True))
    if drew and not compare_random:
        return out  # its own random numbers (fast_random): only that it ran can be checked
    try:
        grads_e = _vjp(torch, flat, params, retain=True)
    except RuntimeError:  # eager cannot take this backward (no graph): nothing to compare
        grads_e = None
    verdict.problem = _compare(
        torch,
        module,
        (outputs_c, [t.detach() for t in flat]),
        (grads_c, grads_e, params),
        (buffers_c, _buffers(torch, module)),
        (rng_c, _rng(torch)) if compare_random else None,
        precision,
    )
    return out


def stateful_argument(args: tuple[Any, ...], kwargs: dict[str, Any]) -> str | None:
    """Why a call cannot be run twice to check it: it takes an object its forward may change
    (transformers' ``DynamicCache``, which each block extends); None when every argument is
    a tensor, a plain constant, or a tuple, list or dict of those."""
    found = _stateful([*args, *kwargs.values()])
    if found is None:
        return None
    return (
        f"its call takes a {found}, an object its forward may change: checking would run "
        "that change twice (pass no such object to it in training, e.g. transformers' "
        "config.use_cache=False, to have it compiled)"
    )


def _stateful(value: Any, depth: int = 0) -> str | None:
    if value is None or isinstance(value, (bool, int, float, str, bytes)):
        return None
    if hasattr(value, "detach") and hasattr(value, "shape"):
        return None
    if type(value).__module__ == "torch" and type(value).__name__ in ("dtype", "device"):
        return None
    if depth < 4 and isinstance(value, (list, tuple)):
        return next(filter(None, (_stateful(item, depth + 1) for item in value)), None)
    if depth < 4 and isinstance(value, dict):
        return next(filter(None, (_stateful(item, depth + 1) for item in value.values())), None)
    return type(value).__name__


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


def _compare(
    torch: Any,
    module: Any,
    outputs: tuple[list[Any], list[Any]],
    grads: tuple[list[Any] | None, list[Any] | None, list[Any]],
    buffers: tuple[list[Any], list[Any]],
    rng: tuple[Any, Any] | None,
    precision: str | None = None,
) -> str | None:
    # First: different random numbers explain every difference that follows.
    if rng is not None and not all(bool(torch.equal(c, e)) for c, e in zip(*rng, strict=True)):
        return (
            "the compiled module drew its random numbers differently from eager: the "
            "script's random stream (dropout masks, data order) would change"
        )
    outputs_c, outputs_e = outputs
    if len(outputs_c) != len(outputs_e):
        return f"the output has {len(outputs_c)} tensors compiled, {len(outputs_e)} eager"
    for index, (c, e) in enumerate(zip(outputs_c, outputs_e, strict=True)):
        found = _differs(torch, c, e, precision=precision)
        if found:
            return _short(f"output {index} {found}")
    grads_c, grads_e, params = grads
    if grads_c is not None and grads_e is not None:
        names = {id(param): name for name, param in module.named_parameters()}
        # Gradients are compared at the scale of the model's largest one: a gradient that
        # is zero in exact arithmetic (a bias before a BatchNorm) is rounding noise on both
        # sides, and its own magnitude is no measure.
        scale = max((float(g.detach().abs().max()) for g in grads_e if g is not None), default=0)
        for param, c, e in zip(params, grads_c, grads_e, strict=True):
            if (c is None) != (e is None):
                return f"the gradient of {names.get(id(param), '?')} is missing on one side"
            found = None if c is None else _differs(torch, c, e, scale, precision)
            if found:
                return _short(f"the gradient of {names.get(id(param), '?')} {found}")
    buffer_names = [name for name, _ in module.named_buffers()]
    for name, c, e in zip(buffer_names, *buffers, strict=False):
        found = _differs(torch, c, e, precision=precision)
        if found:
            return _short(f"buffer {name} after the call {found}")
    return None


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


def tensors(value: Any, depth: int = 0) -> Iterator[Any]:
    """The tensors in an output: a tensor, or lists, tuples, dicts and dataclasses of them."""
    if hasattr(value, "detach") and hasattr(value, "shape"):
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


def _vjp(torch: Any, outputs: list[Any], params: list[Any], *, retain: bool) -> list[Any] | None:
    """Parameter gradients for a fixed upstream gradient; None without a backward."""
    differentiable = [t for t in outputs if t.requires_grad and t.is_floating_point()]
    if not differentiable or not params:
        return None
    generator = torch.Generator().manual_seed(_SEED)
    upstream = [
        torch.randn(t.shape, generator=generator, dtype=torch.float32).to(
            device=t.device, dtype=t.dtype
        )
        for t in differentiable
    ]
    grads = torch.autograd.grad(
        differentiable, params, upstream, retain_graph=retain, allow_unused=True
    )
    return [None if grad is None else grad.detach() for grad in grads]


def _watch_double_backward(torch: Any, outputs: list[Any], verdict: Verdict) -> None:
    """Mark the verdict when a backward through eager's output builds a graph (create_graph)."""

    def seen(grad: Any) -> Any:
        # The engine runs with grad mode on only under create_graph=True.
        if torch.is_grad_enabled() and verdict.problem is None:
            verdict.problem = (
                "a backward through the module with create_graph=True (a gradient penalty "
                "or higher-order gradients): torch's compiled backward does not support "
                "double backward"
            )
        return grad

    for tensor in outputs:
        if tensor.requires_grad:
            tensor.register_hook(seen)


def _buffers(torch: Any, module: Any) -> list[Any]:
    with torch.no_grad():
        return [buffer.detach().clone() for buffer in module.buffers()]


def _rng(torch: Any) -> list[Any]:
    states = [torch.random.get_rng_state()]
    if torch.cuda.is_available() and torch.cuda.is_initialized():
        states.extend(torch.cuda.get_rng_state_all())
    return states


def state_of(torch: Any, module: Any) -> tuple[list[Any], list[Any]]:
    """The module's buffers and the random generators' states: what a call may change."""
    return _buffers(torch, module), _rng(torch)


def put_back(torch: Any, module: Any, state: tuple[list[Any], list[Any]]) -> None:
    """Put back what :func:`state_of` took."""
    buffers, rng = state
    with torch.no_grad():
        for buffer, value in zip(module.buffers(), buffers, strict=False):
            buffer.copy_(value)
    torch.random.set_rng_state(rng[0])
    if len(rng) > 1:
        torch.cuda.set_rng_state_all(rng[1:])


def _short(text: str) -> str:
    return " ".join(text.split())[:_REASON_CHARS]
