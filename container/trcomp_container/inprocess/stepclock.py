"""Step times as the device sees them, for the session's step count.

On a GPU, ``optimizer.step()`` returns as soon as its kernels are queued: with
CUDA graphs or any async execution the CPU-side time between two steps says
how fast Python queues work, not how fast the GPU does it. So at each step the
clock records a timing event on the device's current stream (no
synchronization, the GPU keeps running ahead) and, when the intervals are read
at exit, synchronizes once and measures between the events.

Without a device timeline (CPU, torch-xla, torch not imported) the clock uses
``time.perf_counter``. A timeline is anything with ``event()`` (an object with
``record()``), ``elapsed_s(start, end)`` and ``synchronize()``; tests pass a
simulated asynchronous device. Standard library only at import.
"""

from __future__ import annotations

import sys
import time
from typing import Any, Protocol

__all__ = ["CudaTimeline", "DeviceTimeline", "StepClock", "cuda_timeline"]


class DeviceTimeline(Protocol):
    """Events on a device's stream, and the time between two of them."""

    name: str

    def event(self) -> Any:
        """A new event; ``record()`` puts it on the stream."""

    def elapsed_s(self, start: Any, end: Any) -> float:
        """Seconds between two recorded events (after :meth:`synchronize`)."""

    def synchronize(self) -> None:
        """Wait until every recorded event has completed."""


class CudaTimeline:
    """CUDA timing events on the current stream."""

    name = "cuda-events"

    def __init__(self, torch: Any) -> None:
        self._torch = torch

    def event(self) -> Any:
        return self._torch.cuda.Event(enable_timing=True)

    def elapsed_s(self, start: Any, end: Any) -> float:
        return float(start.elapsed_time(end)) / 1000.0

    def synchronize(self) -> None:
        self._torch.cuda.synchronize()


def cuda_timeline() -> CudaTimeline | None:
    """The CUDA timeline when this process has started CUDA; else None (no CUDA start here)."""
    torch = sys.modules.get("torch")
    if torch is None or "torch_xla" in sys.modules:
        return None
    try:
        if not torch.cuda.is_initialized():
            return None
    except Exception:  # a broken CUDA setup: time on the CPU rather than fail the step
        return None
    return CudaTimeline(torch)


class StepClock:
    """Marks the end of each step; gives the intervals between them.

    ``limit`` caps the number of intervals kept. The timeline is chosen at the
    first mark (``choose`` returns one or None); until then nothing is known
    about the device.
    """

    def __init__(self, limit: int, choose: Any = cuda_timeline) -> None:
        self.limit = limit
        self._choose = choose
        self._timeline: DeviceTimeline | None = None
        self._chosen = False
        self._events: list[Any] = []
        self._cpu: list[float] = []

    @property
    def source(self) -> str:
        """``cuda-events`` (or another timeline's name) or ``cpu``."""
        return self._timeline.name if self._timeline is not None else "cpu"

    def mark(self) -> None:
        """The end of a step (cheap: records an event, never waits for the device)."""
        if not self._chosen:
            self._chosen = True
            try:
                self._timeline = self._choose()
            except Exception:  # any failure to start device timing: the CPU clock
                self._timeline = None
        if len(self._cpu) > self.limit:
            return
        self._cpu.append(time.perf_counter())
        if self._timeline is not None:
            event = self._timeline.event()
            event.record()
            self._events.append(event)

    def cpu_intervals(self) -> list[float]:
        """Seconds between marks as the CPU saw them (what queuing the work took)."""
        return [b - a for a, b in zip(self._cpu, self._cpu[1:], strict=False)]

    def intervals(self) -> list[float]:
        """Seconds between marks on the device's timeline (synchronizes once); CPU's without."""
        if self._timeline is None or len(self._events) < 2:
            return self.cpu_intervals()
        try:
            self._timeline.synchronize()
            return [
                self._timeline.elapsed_s(a, b)
                for a, b in zip(self._events, self._events[1:], strict=False)
            ]
        except Exception:  # a device in an error state: the CPU's view is all there is
            self._timeline = None
            return self.cpu_intervals()
