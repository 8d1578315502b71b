"""The decision between compiled and eager, from step times measured side by side (pure)."""

from __future__ import annotations

import statistics
from collections.abc import Sequence
from dataclasses import asdict, dataclass, replace
from typing import Any, Literal

__all__ = [
    "AGREEMENT",
    "MARGIN",
    "MEMORY_HEADROOM",
    "REMEASURE_AFTER",
    "Decision",
    "agree",
    "decide",
    "memory_too_close",
    "pooled",
]

MARGIN = 0.05
"""Compiled must be this much slower than eager (5%) before it counts as slower."""
AGREEMENT = 0.20
"""The two compiled windows' medians may differ by this much (20%) for a decision."""
REMEASURE_AFTER = 5
"""A stored decision is used by this many jobs, then measured again."""
MEMORY_HEADROOM = 0.80
"""A compiled peak above this share of the device's memory skips the eager window."""

Keep = Literal["compiled", "eager"]


@dataclass(frozen=True)
class Decision:
    """What the job kept, with the numbers behind it."""

    keep: Keep
    eager_step_s: float
    compiled_step_s: float
    speedup: float
    reason: str
    source: Literal["measured", "stored"] = "measured"
    noisy: bool = False
    """The two compiled windows disagreed and neither was slower than eager beyond the
    margin: measure again (:func:`pooled` decides after the last round)."""

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


def decide(
    eager: Sequence[float],
    compiled: Sequence[float],
    *,
    keep_faster: bool,
    margin: float = MARGIN,
    compiled_again: Sequence[float] = (),
    agreement: float = AGREEMENT,
) -> Decision:
    """Keep compiled or eager, from step times measured side by side (pure).

    ``compiled`` and ``compiled_again`` are the windows before and after the eager
    one; when both are given their medians must agree within ``agreement``.
    """
    if not eager or not compiled:
        raise ValueError("decide() needs at least one eager and one compiled step time")
    eager_s = float(statistics.median(eager))
    compiled_s = float(statistics.median([*compiled, *compiled_again]))
    speedup = eager_s / compiled_s if compiled_s > 0 else float("inf")
    shown = f"{speedup:.2f}x"
    if compiled_again:
        first = float(statistics.median(compiled))
        second = float(statistics.median(compiled_again))
        slower_in_both = min(first, second) > (1 + margin) * eager_s
        if max(first, second) > (1 + agreement) * min(first, second) and not slower_in_both:
            return Decision(
                "compiled",
                eager_s,
                compiled_s,
                speedup,
                f"too noisy to decide: the compiled steps ran {first * 1e3:.2f} ms before "
                f"and {second * 1e3:.2f} ms after the eager ones ({eager_s * 1e3:.2f} ms), "
                f"more than {agreement:.0%} apart",
                noisy=True,
            )
        # Slower than eager in both windows: slower, however far apart the windows are.
    if speedup >= 1 - margin:
        verdict = "faster than" if speedup > 1 + margin else "within noise of"
        return Decision(
            "compiled",
            eager_s,
            compiled_s,
            speedup,
            f"compiled steps ran {shown} of eager ({verdict} eager): kept compiling",
        )
    if keep_faster:
        return Decision(
            "eager",
            eager_s,
            compiled_s,
            speedup,
            f"compiled steps ran {shown} of eager, slower beyond the {margin:.0%} noise "
            "margin: the rest of the job ran eager (keep_faster)",
        )
    return Decision(
        "compiled",
        eager_s,
        compiled_s,
        speedup,
        f"compiled steps ran {shown} of eager, slower beyond the {margin:.0%} noise margin; "
        "kept compiling because keep_faster is off (an explicit backend): set "
        "keep_faster=True to let such jobs run eager",
    )


def pooled(
    rounds: Sequence[Sequence[float]], *, keep_faster: bool, margin: float = MARGIN
) -> Decision:
    """The decision after the last round, when every round was too noisy to decide.

    ``rounds``: each round's ``[eager, compiled_first, compiled_again]`` medians. The
    rule on the medians of all rounds together, so the figure and what was kept agree
    (never code measured slower than eager beyond the margin, with ``keep_faster``).
    """
    eager = [figures[0] for figures in rounds]
    compiled = [value for figures in rounds for value in figures[1:]]
    decision = decide(eager, compiled, keep_faster=keep_faster, margin=margin)
    return replace(
        decision,
        reason=f"too noisy to decide in {len(rounds)} measurements; all of them together: "
        + decision.reason,
    )


def memory_too_close(peak: int, total: int, headroom: float = MEMORY_HEADROOM) -> str | None:
    """Why the eager window would risk running out of device memory; None when it would not.

    Eager keeps more activations than inductor's fused kernels (measured: 34 MiB eager
    against 2 MiB compiled on a pointwise-heavy model), so a compiled peak close to
    the device's memory is no place to run eager steps.
    """
    if total <= 0 or peak <= headroom * total:
        return None
    return (
        f"the compiled steps' peak memory ({peak / 2**30:.1f} GiB) is above "
        f"{headroom:.0%} of the device's {total / 2**30:.1f} GiB: eager steps could run "
        "out of memory, so the eager window was skipped (measure_speedup=False skips it "
        "in every job)"
    )


def agree(values: Sequence[Sequence[float] | None]) -> list[float] | str:
    """The slowest rank's figures, from every rank's ``[eager, compiled, compiled_again]``.

    A string says why there is no agreement (a rank measured nothing).
    """
    missing = [rank for rank, figures in enumerate(values) if not figures]
    if missing:
        return f"rank {missing[0]} could not measure its steps"
    columns = zip(*[list(figures or []) for figures in values], strict=True)
    return [max(float(value) for value in column) for column in columns]
