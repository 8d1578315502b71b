"""The measurement's schedule: which optimizer steps run compiled and which eager.

1. warm-up: steps 1 to ``warmup``;
2. ``compiled`` steps, compiled (window A);
3. ``eager`` steps, eager: the hook's own modules call their eager code, a model
   the script compiled runs under ``torch.compiler.set_stance("force_eager")``;
4. ``compiled`` steps, compiled again (window B).

Steps during which something compiled, a module was being checked, or no compiled
code ran (a module the check kept eager) are left out of the medians. The step
times come from the session's step clock (CUDA events on a GPU). A measurement
that cannot decide (too few clean steps, two compiled windows that disagree) is
run again (:meth:`SpeedupProbe.restart`), with longer windows, up to
:data:`ROUNDS` times in all.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Literal

__all__ = ["MIN_CLEAN", "ROUNDS", "Measurement", "SpeedupProbe", "step_times"]

MIN_CLEAN = 2
"""Clean (nothing compiled) steps a window needs."""
ROUNDS = 3
"""Measurements a job runs at most: a round that cannot decide is run again, longer."""

Phase = Literal["warmup", "compiled", "eager", "after", "done"]


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
    ``finish(measurement)``, which returns what the rest of the job runs. Only
    its own methods change ``phase``: :meth:`use_stored` and :meth:`abandon`
    end it from outside.
    """

    warmup: int = 3
    compiled: int = 4
    eager: int = 4
    phase: Phase = "warmup"
    measurement: Measurement = field(default_factory=Measurement)
    not_measured: str | None = None
    start: int = 0
    """The step before this round's warm-up (0 for the first round)."""
    round: int = 1
    """This measurement's round (1 to :data:`ROUNDS`)."""
    earlier_eager_steps: list[int] = field(default_factory=list)
    """The eager steps of earlier rounds (left out of the steady step time too)."""
    _last_events: int = 0

    @property
    def last_step(self) -> int:
        return self.start + self.warmup + 2 * self.compiled + self.eager

    @property
    def eager_steps(self) -> list[int]:
        """Every step that ran eager for the comparison, all rounds."""
        return [*self.earlier_eager_steps, *self.measurement.eager_steps]

    @property
    def can_restart(self) -> bool:
        """Whether another round may run (:data:`ROUNDS`)."""
        return self.round < ROUNDS

    def restart(self) -> None:
        """Measure again after this round's last step: one warm-up step, windows twice as
        long (called from ``finish``, which then returns ``"compiled"``)."""
        self.earlier_eager_steps = self.eager_steps
        self.measurement = Measurement()
        self.start, self.warmup = self.last_step, 1
        self.compiled, self.eager = 2 * self.compiled, 2 * self.eager
        self.round += 1
        self.phase = "warmup"

    @property
    def done(self) -> bool:
        return self.phase == "done"

    @property
    def measuring(self) -> bool:
        """Whether a window is open (the script changing optimizer would spoil it)."""
        return self.phase in ("compiled", "eager", "after")

    def on_step(
        self,
        step: int,
        compile_events: int,
        finish: Callable[[Measurement], str | None],
        *,
        compiled: bool = True,
    ) -> str | None:
        """After 1-based ``step``; ``compiled``: compiled code ran during the step and no
        module was being checked (compile events alone may be frames dynamo tried and
        skipped; a graph compiled for a module its check kept eager never runs)."""
        clean = compile_events == self._last_events and compiled
        self._last_events = compile_events
        eager_from = self.start + self.warmup + self.compiled + 1
        again_from = eager_from + self.eager
        if self.phase == "done":
            return None
        if step <= self.start + self.warmup:
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
        if len(self.measurement.compiled_first) < MIN_CLEAN or (
            len(self.measurement.compiled_again) < MIN_CLEAN
        ):
            return (
                "the compiler was still compiling, or no compiled code ran, during the "
                f"measurement window (steps {self.start + self.warmup + 1} to "
                f"{self.last_step}): recompiles, a module being checked, or nothing compiled"
            )
        return None

    def use_stored(self) -> None:
        """An earlier job's decision applies: nothing to measure."""
        self.phase = "done"

    def abandon(self, reason: str) -> None:
        """Stop measuring (the script changed optimizer, an error): no decision."""
        self.phase = "done"
        self.not_measured = reason

    def steps_needed(self) -> int:
        """The fewest optimizer steps a job needs for the measurement (this round)."""
        return self.last_step


def step_times(intervals: Sequence[float], steps: Sequence[int]) -> list[float]:
    """Durations of 1-based ``steps`` from the clock's intervals (interval i ends step i+2)."""
    return [intervals[step - 2] for step in steps if 0 <= step - 2 < len(intervals)]
