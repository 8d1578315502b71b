"""Eager against compiled, on the user's own model and data, and the choice between them.

Inside the job's training process, after the compiled steps have settled, the
start-up hook runs a few optimizer steps with ``torch.compiler.set_stance
("force_eager")`` and compares them with the compiled steps just before:

1. warm-up: steps until something has compiled and ``warmup`` steps have run;
2. ``compiled`` clean steps (no compile event during the step);
3. ``eager`` steps under ``force_eager``; then back to the compiled code;
4. ``compiled`` clean steps again, so a machine that slows down or speeds up
   during the window (other work, clocks) weighs on both sides alike.

The step times come from the hook's step clock (CUDA events on a GPU). Under
torchrun every rank measures and the ranks agree on the slowest rank's numbers
before deciding, so the whole job makes one decision. The rule (:func:`decide`)
is a pure function of the measured times: with ``keep_faster`` a compiled step
slower than eager beyond ``MARGIN`` (noise) makes the rest of the job run eager.

The decision is stored (:class:`DecisionStore`) in the job's compile cache,
keyed by a fingerprint of the model, the config and the versions, so the next
job of the same lineage starts with it instead of measuring again.

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
    "MARGIN",
    "Decision",
    "DecisionStore",
    "Measurement",
    "SpeedupProbe",
    "agree",
    "decide",
    "fingerprint",
]

MARGIN = 0.05
"""Compiled must be this much slower than eager (5%) before it counts as slower."""
_GIVE_UP_AFTER = 60  # steps without anything compiled, or without steady compiled steps

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
) -> Decision:
    """Keep compiled or eager, from step times measured side by side (pure)."""
    if not eager or not compiled:
        raise ValueError("decide() needs at least one eager and one compiled step time")
    eager_s = float(statistics.median(eager))
    compiled_s = float(statistics.median(compiled))
    speedup = eager_s / compiled_s if compiled_s > 0 else float("inf")
    shown = f"{speedup:.2f}x"
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


def agree(
    eager_s: float, compiled_s: float, reduce_max: Callable[[list[float]], list[float]] | None
) -> tuple[float, float]:
    """The slowest rank's eager and compiled step times (``reduce_max`` across ranks)."""
    if reduce_max is None:
        return eager_s, compiled_s
    eager_all, compiled_all = reduce_max([eager_s, compiled_s])
    return float(eager_all), float(compiled_all)


@dataclass
class Measurement:
    """Which steps ran compiled and which eager for the comparison (1-based step numbers)."""

    compiled_steps: list[int] = field(default_factory=list)
    eager_steps: list[int] = field(default_factory=list)


@dataclass
class SpeedupProbe:
    """The measurement's state machine, fed once per optimizer step.

    :meth:`on_step` returns the stance to switch to after this step (``"force_eager"``
    or ``"default"``), or None. When the last compiled steps are in it calls
    ``finish(measurement)``, which returns the stance for the rest of the job.
    """

    warmup: int = 3
    compiled: int = 4
    eager: int = 4
    phase: Literal["warmup", "compiled", "eager", "after", "done"] = "warmup"
    measurement: Measurement = field(default_factory=Measurement)
    not_measured: str | None = None
    _last_events: int = 0

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
        clean = compile_events == self._last_events
        self._last_events = compile_events
        if self.phase == "warmup":
            if compile_events and compiled and step >= self.warmup:
                self.phase = "compiled"
            elif step >= _GIVE_UP_AFTER:
                self._give_up("nothing was compiled in the first steps")
            return None
        if self.phase in ("compiled", "after"):
            if clean:
                self.measurement.compiled_steps.append(step)
            wanted = self.compiled * (2 if self.phase == "after" else 1)
            if len(self.measurement.compiled_steps) >= wanted:
                if self.phase == "after":
                    self.phase = "done"
                    return finish(self.measurement)
                self.phase = "eager"
                return "force_eager"
            if step >= _GIVE_UP_AFTER + (self.measurement.eager_steps[-1:] or [0])[0]:
                self._give_up("the compiler was still compiling at every step (recompiles)")
                return "default"
            return None
        if self.phase == "eager":
            self.measurement.eager_steps.append(step)
            if len(self.measurement.eager_steps) >= self.eager:
                self.phase = "after"
                return "default"
        return None

    def _give_up(self, reason: str) -> None:
        self.phase = "done"
        self.not_measured = reason

    def steps_needed(self) -> int:
        """The fewest optimizer steps a job needs for the measurement."""
        return self.warmup + 2 * self.compiled + self.eager


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

    def load(self, key: str) -> Decision | None:
        """The stored decision for ``key``; None when absent or unreadable."""
        entry = self._read().get(key)
        if not isinstance(entry, dict):
            return None
        try:
            fields = {name: entry[name] for name in Decision.__dataclass_fields__}
            fields["source"] = "stored"
            return Decision(**fields)
        except (KeyError, TypeError):
            return None

    def save(self, key: str, decision: Decision) -> None:
        """Add or replace ``key``'s decision, atomically (write a temp file, rename)."""
        body = self._read()
        body[key] = {**decision.as_dict(), "source": "measured"}
        self.path.parent.mkdir(parents=True, exist_ok=True)
        handle, temp = tempfile.mkstemp(dir=self.path.parent, prefix=".speedup.", suffix=".tmp")
        with os.fdopen(handle, "w") as out:
            json.dump(body, out, indent=1, sort_keys=True)
        os.replace(temp, self.path)
