"""Rounds: eager and each compiler measured in turn, each round's ratio, and whether to trust it.

A benchmark run measures every (workload, backend) once per round, and within a
round a workload's backends run back to back in an order rotated each round
(eager, inductor; then inductor, eager; ...: :func:`round_order`). Each round
then gives its own ratio against eager (:func:`round_ratios`: eager's median
step of that round over the compiler's of that round), measured minutes or
seconds apart instead of a whole run apart. The row's ratio is the median of
its rounds' ratios and its spread their minimum and maximum.

The 1-minute load average (``os.getloadavg``) is read before and after every
measurement (:func:`load_average`). :func:`judge` calls a row's ratios
unreliable when the load moved by more than ``load_bound`` over the rounds of
the row and of its eager row, or when its rounds' ratios differ by more than
``spread_bound`` (largest over smallest, minus one). Pure functions: tested
with made-up steps and loads; nothing here imports torch.
"""

from __future__ import annotations

import os
import statistics
from collections.abc import Iterable, Sequence
from typing import Any, TypeVar

__all__ = [
    "DEFAULT_SPREAD_BOUND",
    "default_load_bound",
    "judge",
    "load_average",
    "median_step",
    "ratio_and_spread",
    "round_order",
    "round_ratios",
]

T = TypeVar("T")

DEFAULT_SPREAD_BOUND = 0.25
"""Rounds whose ratios differ by more than 25% (largest over smallest) disagree."""


def default_load_bound() -> float:
    """One unit of 1-minute load average per CPU core: a whole machine's worth of other work.

    The benchmark's own processes move the load too (a compile uses every core),
    so the bound is loose on purpose: it catches other work starting or
    stopping, not the benchmark's own.
    """
    return float(os.cpu_count() or 1)


def load_average() -> float | None:
    """The 1-minute load average now, rounded to 0.01; None where the system has none."""
    try:
        return round(os.getloadavg()[0], 2)
    except OSError:
        return None


def round_order(items: Sequence[T], round_no: int) -> list[T]:
    """``items`` rotated by ``round_no``: each round starts with the next one (ABBA...)."""
    by = round_no % max(len(items), 1)
    return [*items[by:], *items[:by]]


def median_step(run: dict[str, Any]) -> float:
    """The median steady step of one measurement (a worker's ``step_times_s``)."""
    return float(statistics.median(run["step_times_s"]))


def round_ratios(eager_steps: Sequence[float], steps: Sequence[float]) -> list[float]:
    """Each round's speed-up over eager: eager's step of the round over this backend's (>1 faster).

    Both sequences are indexed by round; a round that only one side has is left out.
    """
    return [eager / step for eager, step in zip(eager_steps, steps, strict=False)]


def ratio_and_spread(ratios: Sequence[float]) -> tuple[float, float, float]:
    """(median, minimum, maximum) of the per-round ratios."""
    if not ratios:
        raise ValueError("no rounds: a ratio needs at least one round")
    return float(statistics.median(ratios)), min(ratios), max(ratios)


def _known(loads: Iterable[float | None]) -> list[float]:
    return [load for load in loads if load is not None]


def judge(
    ratios: Sequence[float] | None,
    loads: Iterable[float | None],
    *,
    load_bound: float,
    spread_bound: float = DEFAULT_SPREAD_BOUND,
) -> str | None:
    """Why a row's ratios are not to be trusted (None: nothing says so).

    ``loads`` are the load averages read around every run the ratios come from
    (the row's and its eager row's); ``ratios`` the per-round ratios (None or
    empty: only the load is judged).
    """
    reasons = []
    known = _known(loads)
    if known and max(known) - min(known) > load_bound:
        reasons.append(f"load changed ({min(known):.1f} to {max(known):.1f}, bound {load_bound:g})")
    if ratios and min(ratios) > 0 and max(ratios) / min(ratios) - 1 > spread_bound:
        reasons.append(
            f"rounds disagree ({min(ratios):.2f}x to {max(ratios):.2f}x, bound {spread_bound:.0%})"
        )
    return "; ".join(reasons) + ": ratios unreliable" if reasons else None
