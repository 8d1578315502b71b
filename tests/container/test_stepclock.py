"""Step times on the device's timeline, and a metrics hook that stays out of compiled graphs."""

from __future__ import annotations

import json
import os
import queue
import threading
from pathlib import Path
from typing import Any

import pytest

from tests.helpers import forkserver
from tests.helpers.hook import run_hooked
from trcomp_container.inprocess.stepclock import StepClock
from trcomp_container.summary import steady_step_time

# Kernel durations on the simulated device's clock: each step a different length,
# so an interval that is not the device's own (the CPU's, a neighbour's) shows.
KERNEL_S = (0.05, 0.07, 0.02, 0.11, 0.05, 0.03, 0.08, 0.06)


class _Event:
    def __init__(self, device: SimulatedAsyncDevice) -> None:
        self.device = device
        self.time: float | None = None

    def record(self) -> None:
        self.device.queue.put(self)


class SimulatedAsyncDevice:
    """A CPU stand-in for a GPU stream: queued work runs later, in order, on a worker thread.

    Its clock is virtual: a kernel of ``s`` seconds moves the device's time on by
    ``s`` without sleeping, and an event records the device's time when the
    stream reaches it. Step times read from it are exact, whatever the machine's load.
    """

    name = "simulated"

    def __init__(self) -> None:
        self.queue: queue.Queue[Any] = queue.Queue()
        self.completed = 0
        self.now = 0.0  # the device's clock, in seconds
        # The device starts on go() (or after 30 s): until then the CPU is ahead of it
        # whatever the machine's load, so the test counts, never races.
        self.started = threading.Event()
        threading.Thread(target=self._run, daemon=True).start()

    def go(self) -> None:
        self.started.set()

    def _run(self) -> None:
        self.started.wait(timeout=30)
        while True:
            item = self.queue.get()
            if isinstance(item, _Event):
                item.time = self.now
            else:
                self.now += item  # a kernel that takes `item` seconds of device time
                self.completed += 1
            self.queue.task_done()

    def launch(self, seconds: float) -> None:
        self.queue.put(seconds)

    def event(self) -> _Event:
        return _Event(self)

    def elapsed_s(self, start: _Event, end: _Event) -> float:
        assert start.time is not None and end.time is not None
        return end.time - start.time

    def synchronize(self) -> None:
        self.queue.join()


def test_step_time_is_the_devices_not_the_time_to_queue_work() -> None:
    device = SimulatedAsyncDevice()
    clock = StepClock(100, choose=lambda: device)
    for seconds in KERNEL_S:
        device.launch(seconds)  # returns at once, like a CUDA kernel launch
        clock.mark()
    done_when_marked = device.completed
    device.go()
    intervals = clock.intervals()

    assert done_when_marked == 0  # marking never waited for the device
    assert device.completed == len(KERNEL_S)  # intervals() waited for the device
    assert clock.source == "simulated"
    # Each interval is the next step's kernel, on the device's timeline.
    assert intervals == pytest.approx(KERNEL_S[1:], abs=1e-12)
    # The median after the two warm-up intervals: of 0.11, 0.05, 0.03, 0.08, 0.06.
    assert steady_step_time(intervals) == pytest.approx(0.06, abs=1e-12)


def test_without_a_device_the_clock_is_the_cpus() -> None:
    clock = StepClock(3, choose=lambda: None)
    for _ in range(10):
        clock.mark()
    assert clock.source == "cpu"
    assert len(clock.intervals()) == 3  # capped


# Graph breaks, calls dynamo could not inline and graphs are dynamo's counters, decided
# while it traces, before the backend gets the graph: aot_eager (AOTAutograd's joint graph,
# as inductor gets it, run eagerly) counts the same as inductor without generating and
# building C++ kernels, which took three quarters of each child's CPU time here.
COMPILED_STEP = """
import json, torch
from torch._dynamo.utils import counters
model = torch.nn.Linear(4, 4)
opt = torch.optim.SGD(model.parameters(), lr=0.1)

@torch.compile(backend="aot_eager")
def step():
    opt.step()

for _ in range(3):
    model(torch.ones(2, 4)).sum().backward()
    step()
print(json.dumps({
    "graphs": counters["stats"]["unique_graphs"],
    "breaks": sum(counters["graph_break"].values()),
    "unimplemented": sum(counters["unimplemented"].values()),
    "inline_failures": sum(counters["inline_call"].values()),
}))
"""


@pytest.mark.slow
def test_hook_adds_no_graph_break_to_a_compiled_optimizer_step(tmp_path: Path) -> None:
    hooked = run_hooked(tmp_path, COMPILED_STEP, fork=True)
    assert hooked.returncode == 0, hooked.stderr
    env = {k: v for k, v in os.environ.items() if not k.startswith("TRCOMP_")}
    plain = forkserver.run_python(["-c", COMPILED_STEP], env, capture_output=True, text=True)
    assert plain.returncode == 0, plain.stderr

    # The same dynamo counters with and without the hook: no extra graph break, no
    # call dynamo could not inline (time.time() in the hook was one), no extra graph.
    counted = json.loads(hooked.stdout.strip().splitlines()[-1])
    assert counted == json.loads(plain.stdout.strip().splitlines()[-1])
    (path,) = (tmp_path / "ranks").glob("rank3-pid*.json")
    record = json.loads(path.read_text())
    assert record["steps"] == 3  # and the compiled steps were still counted
    assert record["step_clock"] == "cpu"
