"""Batch-size finder and learning-rate scaling.

The old product shipped tables of batch sizes that often did not fit; this
measures instead. Each trial trains a few steps in its own process: on a GPU a
batch fits when it does not run out of CUDA memory (and stays under
``memory_budget_mb`` when given); on the CPU there is nothing to run out of
before the machine swaps, so a budget for the process's peak RSS is required.

With the larger batch, scale the learning rate, as the Training Compiler
best-practice guide advised: linearly (``lr * new / base``, the usual choice
for SGD-like training at moderate batch sizes) or by the square root
(``lr * sqrt(new / base)``, gentler, often better for Adam and large batches).
"""

from __future__ import annotations

import math
import os
import tempfile
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal

from trcomp_bench.backends import backend_env
from trcomp_bench.harness import RunFailed, Runner, run_measurement
from trcomp_bench.worker import RunSpec

__all__ = [
    "BatchSizeResult",
    "Trial",
    "find_batch_size",
    "scale_learning_rate",
    "search_max_batch_size",
]

Scaling = Literal["linear", "sqrt"]


def scale_learning_rate(
    base_lr: float, base_batch_size: int, batch_size: int, rule: Scaling = "linear"
) -> float:
    """The learning rate for ``batch_size``, given one tuned at ``base_batch_size``."""
    if base_lr <= 0 or base_batch_size <= 0 or batch_size <= 0:
        raise ValueError("learning rate and batch sizes must be positive")
    ratio = batch_size / base_batch_size
    if rule == "linear":
        return base_lr * ratio
    if rule == "sqrt":
        return base_lr * math.sqrt(ratio)
    raise ValueError(f"unknown scaling rule {rule!r}: use 'linear' or 'sqrt'")


def search_max_batch_size(fits: Callable[[int], bool], start: int = 1, limit: int = 4096) -> int:
    """The largest batch size in ``[start, limit]`` for which ``fits`` holds; 0 if none.

    Doubles from ``start`` until a size fails, then bisects between the last size
    that fitted and the first that did not: about ``2 * log2(answer)`` trials.
    Assumes that a batch that does not fit means no larger one fits.
    """
    if start < 1 or limit < start:
        raise ValueError("need 1 <= start <= limit")
    if not fits(start):
        return 0
    good, bad = start, None
    while bad is None:
        nxt = min(good * 2, limit)
        if nxt == good:
            return good
        if fits(nxt):
            good = nxt
        else:
            bad = nxt
    while bad - good > 1:
        mid = (good + bad) // 2
        if fits(mid):
            good = mid
        else:
            bad = mid
    return good


@dataclass(frozen=True)
class Trial:
    """One batch size tried: whether it fitted, its peak memory, and why not."""

    batch_size: int
    fits: bool
    peak_mem_mb: float | None
    reason: str = ""


@dataclass
class BatchSizeResult:
    """The largest batch that fits for a backend, and the learning rates to use with it."""

    backend: str
    batch_size: int
    lr_linear: float | None
    lr_sqrt: float | None
    device: str = ""
    trials: list[Trial] = field(default_factory=list)


def find_batch_size(
    backend: str,
    workload: str = "gpt2",
    model: str | None = None,
    size: str = "small",
    memory_budget_mb: float | None = None,
    base_lr: float = 1e-3,
    base_batch_size: int = 8,
    start: int = 1,
    limit: int = 1024,
    device: str = "auto",
    steps: int = 3,
    runner: Runner | None = None,
) -> BatchSizeResult:
    """The largest batch of ``workload`` (or a user's ``module:factory``) that fits.

    Every trial is a subprocess training ``steps`` steps on ``backend`` (cache
    shared between trials, so later trials start warmer). Raises ValueError on a
    non-CUDA device without ``memory_budget_mb``.
    """
    trials: list[Trial] = []
    devices: list[str] = []
    run = runner or run_measurement

    with tempfile.TemporaryDirectory(prefix="trcomp-bs-") as cache:
        env = backend_env(backend, Path(cache), os.environ)

        def fits(batch_size: int) -> bool:
            spec = RunSpec(
                backend=backend, batch_size=batch_size, workload=workload, model=model,
                size=size, steps=steps, warmup=0, lr=base_lr, device=device,
            )  # fmt: skip
            try:
                result = run(spec, env)
            except RunFailed as exc:
                if not exc.result.get("oom"):
                    raise  # a real error, not a full memory: do not hide it as "too big"
                trials.append(Trial(batch_size, False, None, str(exc)))
                return False
            devices.append(result["device"])
            peak = float(result["peak_mem_mb"])
            if memory_budget_mb is None and not result["device"].startswith("cuda"):
                raise ValueError(
                    f"on {result['device']} nothing runs out of memory before the machine "
                    "swaps: give a memory budget (--memory-budget-mb) for the process's peak RSS"
                )
            ok = memory_budget_mb is None or peak <= memory_budget_mb
            reason = "" if ok else f"peak {peak:.0f} MiB > budget {memory_budget_mb:.0f} MiB"
            trials.append(Trial(batch_size, ok, peak, reason))
            return ok

        best = search_max_batch_size(fits, start, limit)
    return BatchSizeResult(
        backend=backend,
        batch_size=best,
        lr_linear=scale_learning_rate(base_lr, base_batch_size, best) if best else None,
        lr_sqrt=scale_learning_rate(base_lr, base_batch_size, best, "sqrt") if best else None,
        device=devices[0] if devices else "",
        trials=trials,
    )
