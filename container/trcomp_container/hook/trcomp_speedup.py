"""Eager against compiled, on the user's own model and data, and the choice between them.

Inside the job's training process, after the compiled steps have settled, the
start-up hook runs a few optimizer steps eager and compares them with the
compiled steps around them, on a fixed schedule of step numbers (the same on
every rank, whatever each rank compiled when):

1. warm-up: steps 1 to ``warmup``;
2. ``compiled`` steps, compiled (window A);
3. ``eager`` steps, eager: the hook's own modules call their eager code, a model
   the script compiled runs under ``torch.compiler.set_stance("force_eager")``;
4. ``compiled`` steps, compiled again (window B).

Steps during which something compiled are left out of the medians. The step
times come from the hook's step clock (CUDA events on a GPU). Under torchrun
every rank measures and the ranks exchange their figures through the c10d
store (never a collective on the training group, which DDP is using), and
decide on the slowest rank's numbers, so the whole job makes one decision.

The rule (:func:`decide`) is a pure function of the measured times: the two
compiled windows must agree (else "too noisy to decide", keep compiled); then
with ``keep_faster`` a compiled step slower than eager beyond ``MARGIN``
(noise) makes the rest of the job run eager.

The decision is stored (:class:`DecisionStore`) in the job's compile cache,
keyed by a fingerprint of everything that changes the answer (model, input
shapes and dtypes, autocast, the script and its arguments, world size, device
model and count, versions), and measured again every :data:`REMEASURE_AFTER` jobs.

Standard library only at import.
"""

from __future__ import annotations

import hashlib
import json
import os
import statistics
import tempfile
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Literal

__all__ = [
    "AGREEMENT",
    "MARGIN",
    "MEMORY_HEADROOM",
    "REMEASURE_AFTER",
    "Decision",
    "DecisionStore",
    "Measurement",
    "SpeedupProbe",
    "agree",
    "decide",
    "fingerprint",
    "memory_too_close",
]

MARGIN = 0.05
"""Compiled must be this much slower than eager (5%) before it counts as slower."""
AGREEMENT = 0.20
"""The two compiled windows' medians may differ by this much (20%) for a decision."""
REMEASURE_AFTER = 5
"""A stored decision is used by this many jobs, then measured again."""
MEMORY_HEADROOM = 0.80
"""A compiled peak above this share of the device's memory skips the eager window."""
_MIN_CLEAN = 2  # clean (nothing compiled) steps a window needs

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
        if max(first, second) > (1 + agreement) * min(first, second):
            return Decision(
                "compiled",
                eager_s,
                compiled_s,
                speedup,
                f"too noisy to decide: the compiled steps ran {first * 1e3:.2f} ms before "
                f"and {second * 1e3:.2f} ms after the eager ones ({eager_s * 1e3:.2f} ms), "
                f"more than {agreement:.0%} apart: kept compiling",
            )
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


@dataclass
class Measurement:
    """Which steps ran compiled and which eager for the comparison (1-based step numbers)."""

    compiled_steps: list[int] = field(default_factory=list)
    eager_steps: list[int] = field(default_factory=list)
    compiled_again: list[int] = field(default_factory=list)
    """The clean steps of the second compiled window (also in ``compiled_steps``)."""

    @property
    def compiled_first(self) -> list[int]:
        return [step for step in self.compiled_steps if step not in self.compiled_again]


@dataclass
class SpeedupProbe:
    """The measurement's state machine, fed once per optimizer step, on fixed step numbers.

    :meth:`on_step` returns ``"eager"`` or ``"compiled"`` when the next steps must
    switch, or None. After the last step of window B it calls
    ``finish(measurement)``, which returns what the rest of the job runs.
    """

    warmup: int = 3
    compiled: int = 4
    eager: int = 4
    phase: Literal["warmup", "compiled", "eager", "after", "done"] = "warmup"
    measurement: Measurement = field(default_factory=Measurement)
    not_measured: str | None = None
    _last_events: int = 0

    @property
    def last_step(self) -> int:
        return self.warmup + 2 * self.compiled + self.eager

    def on_step(
        self,
        step: int,
        compile_events: int,
        finish: Callable[[Measurement], str | None],
        *,
        compiled: bool = True,
    ) -> str | None:
        """After 1-based ``step``; ``compiled``: some graph exists (compile events alone may
        be frames dynamo tried and skipped)."""
        clean = compile_events == self._last_events and compiled
        self._last_events = compile_events
        eager_from = self.warmup + self.compiled + 1
        again_from = eager_from + self.eager
        if self.phase == "done":
            return None
        if step <= self.warmup:
            return None
        if step < eager_from:
            self.phase = "compiled"
            if clean:
                self.measurement.compiled_steps.append(step)
            return "eager" if step == eager_from - 1 else None
        if step < again_from:
            self.phase = "eager"
            self.measurement.eager_steps.append(step)
            return "compiled" if step == again_from - 1 else None
        self.phase = "after"
        if clean:
            self.measurement.compiled_steps.append(step)
            self.measurement.compiled_again.append(step)
        if step < self.last_step:
            return None
        self.phase = "done"
        return finish(self.measurement)

    def usable(self) -> str | None:
        """Why the finished windows cannot be compared; None when they can."""
        if len(self.measurement.compiled_first) < _MIN_CLEAN or (
            len(self.measurement.compiled_again) < _MIN_CLEAN
        ):
            return (
                "the compiler was still compiling during the measurement window "
                f"(steps {self.warmup + 1} to {self.last_step}): recompiles, or nothing compiled"
            )
        return None

    def abandon(self, reason: str) -> None:
        """Stop measuring (the script changed optimizer, an error): no decision."""
        self.phase = "done"
        self.not_measured = reason

    def steps_needed(self) -> int:
        """The fewest optimizer steps a job needs for the measurement."""
        return self.last_step


def step_times(intervals: Sequence[float], steps: Sequence[int]) -> list[float]:
    """Durations of 1-based ``steps`` from the clock's intervals (interval i ends step i+2)."""
    return [intervals[step - 2] for step in steps if 0 <= step - 2 < len(intervals)]


def fingerprint(parts: dict[str, Any]) -> str:
    """A stable hash of what makes a measurement valid (model, config, versions, device)."""
    text = json.dumps(parts, sort_keys=True, default=str)
    return hashlib.sha256(text.encode()).hexdigest()[:20]


class DecisionStore:
    """Decisions of earlier jobs, one JSON file in the compile cache, keyed by fingerprint."""

    def __init__(self, path: Path) -> None:
        self.path = path

    def _read(self) -> dict[str, Any]:
        try:
            body = json.loads(self.path.read_text())
        except (OSError, ValueError):
            return {}
        return body if isinstance(body, dict) else {}

    def load(self, key: str) -> tuple[Decision, int] | None:
        """The stored decision for ``key`` and how many jobs used it; None when absent."""
        entry = self._read().get(key)
        if not isinstance(entry, dict):
            return None
        try:
            fields = {name: entry[name] for name in Decision.__dataclass_fields__}
            fields["source"] = "stored"
            return Decision(**fields), int(entry.get("uses", 0))
        except (KeyError, TypeError, ValueError):
            return None

    def save(self, key: str, decision: Decision, *, uses: int = 0) -> None:
        """Add or replace ``key``'s decision, atomically (write a temp file, rename)."""
        body = self._read()
        body[key] = {**decision.as_dict(), "source": "measured", "uses": uses}
        self.path.parent.mkdir(parents=True, exist_ok=True)
        handle, temp = tempfile.mkstemp(dir=self.path.parent, prefix=".speedup.", suffix=".tmp")
        with os.fdopen(handle, "w") as out:
            json.dump(body, out, indent=1, sort_keys=True)
        os.replace(temp, self.path)
