"""One state per trained module (issue 41): the speed-up windows, the record and the summary
read it, never "was a graph compiled".

Real torch in this process, dynamo's ``aot_eager`` backend (or one that miscompiles on
purpose); the step clock is simulated, so what is asserted is counters and states, never
wall time.
"""

from __future__ import annotations

from typing import Any

import pytest

from trcomp.contract.runtime_config import RuntimeConfig
from trcomp_container.inprocess import autocompile
from trcomp_container.inprocess import switch as switch_module
from trcomp_container.inprocess.record import RankRecord
from trcomp_container.inprocess.settings import Settings
from trcomp_container.inprocess.state import ModuleFacts, ModuleState, module_state
from trcomp_container.summary import build_summary, render_block

torch = pytest.importorskip("torch")
nn = torch.nn

_MADE: list[autocompile.AutoCompile] = []


@pytest.fixture(autouse=True)
def _fresh_dynamo():
    torch._dynamo.reset()
    yield
    while _MADE:  # every change the hooks made, undone (as a session closes)
        _MADE.pop()._ledger.close()
    torch.compiler.set_stance("default")
    torch._dynamo.reset()


class Net(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.a = nn.Linear(4, 8)
        self.b = nn.Linear(8, 1)

    def forward(self, x):
        return self.b(torch.tanh(self.a(x)))


def wrong(gm, example_inputs):
    """A dynamo backend that miscompiles every graph: outputs scaled by 1.5."""

    def scaled(*args):
        out = gm(*args)
        return type(out)(o * 1.5 if o.is_floating_point() else o for o in out)

    return scaled


class Clock:
    """The session's step clock, simulated: compiled steps 0.05 s, eager ones 0.10 s, so
    a measurement of the same code in both windows would read 2x."""

    def __init__(self, eager_steps: list[int]) -> None:
        self.eager_steps = eager_steps
        self.last = 0

    def intervals(self) -> list[float]:
        return [0.10 if step in self.eager_steps else 0.05 for step in range(2, self.last + 1)]


def switch_with_hooks(backend: Any, *, verify: bool = True) -> switch_module.Switch:
    """The job's switch (inductor, measuring) with the zero-code hook on ``backend``."""
    config = RuntimeConfig(enabled=True, backend="inductor", engine="inductor", auto_compile=False)
    switch = switch_module.Switch(torch, config, Settings.from_env({}))
    hooks = autocompile.AutoCompile(
        torch, compile_kwargs={"backend": backend}, fallback_eager=True, verify=verify
    )
    hooks.install()
    _MADE.append(hooks)
    switch.autocompile = hooks
    return switch


def train(switch: switch_module.Switch, steps: int, batch: int = 6) -> Net:
    torch.manual_seed(0)
    model = Net()
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    assert switch.probe is not None
    clock = Clock(switch.probe.measurement.eager_steps)
    for step in range(1, steps + 1):
        model(torch.randn(batch, 4)).pow(2).mean().backward()
        opt.step()
        opt.zero_grad()
        clock.last = step
        switch.on_step(step, compile_events=1, clock=clock)
    return model


def summary_of(switch: switch_module.Switch, steps: int) -> dict[str, Any]:
    body = {
        "rank": 0,
        "pid": 1,
        "steps": steps,
        "step_intervals_s": [0.05] * (steps - 1),
        "compile": {"time_s": 1.0, "graphs": 2, "events": 2},
        **switch.report(wall_s=10.0, steps=steps),
    }
    record = RankRecord.from_json(body)
    return build_summary([record], job={"backend": "inductor"})


def test_a_module_the_check_kept_eager_gets_no_speedup_figure_and_no_kept_compiled():
    # Issue 41 (imagenet resnet18): the check kept the model eager, both windows ran the
    # same eager code, and the summary said "1.15x ... kept compiled".
    switch = switch_with_hooks(wrong)
    train(switch, steps=16)
    (entry,) = switch.autocompile.compiled
    assert entry.failed.startswith("verification: ") and not entry.ran_compiled
    assert entry.state is ModuleState.EAGER_BY_VERDICT
    assert switch.decision is None
    report = switch.report(wall_s=10.0, steps=16)
    assert report["speedup"]["eager_steps"] == []  # no eager window run for nothing
    assert report["speedup"]["not_measured"].startswith("no compiled code ran")
    assert report["autocompile"]["modules"][0]["state"] == "eager_by_verdict"
    summary = summary_of(switch, 16)
    assert summary["speedup"]["speedup_vs_eager"] is None
    assert summary["speedup"]["kept"] is None
    assert "speedup_vs_eager" not in summary["metrics"]
    assert "kept compiled" not in render_block(summary)
    assert "not measured: no compiled code ran" in render_block(summary)


def test_a_module_that_ran_compiled_is_measured_on_steps_that_ran_compiled_code():
    switch = switch_with_hooks("aot_eager")
    train(switch, steps=16)
    (entry,) = switch.autocompile.compiled
    assert entry.state is ModuleState.COMPILED_VERIFIED and entry.calls > 0
    assert switch.decision is not None and switch.decision.keep == "compiled"
    assert switch.decision.speedup == pytest.approx(2.0)
    report = switch.report(wall_s=10.0, steps=16)
    assert report["speedup"]["compiled_steps"] == [4, 5, 6, 7, 12, 13, 14, 15]
    assert report["autocompile"]["modules"][0]["state"] == "compiled_verified"
    assert summary_of(switch, 16)["speedup"]["kept"] == "compiled"


def test_a_module_compiled_unchecked_by_choice_is_measured_from_its_first_window():
    switch = switch_with_hooks("aot_eager", verify=False)
    train(switch, steps=16)
    (entry,) = switch.autocompile.compiled
    assert entry.state is ModuleState.COMPILED_UNCHECKED and entry.verified_calls == 0
    assert switch.decision is not None and switch.decision.keep == "compiled"
    report = switch.report(wall_s=10.0, steps=16)
    assert report["autocompile"]["modules"][0]["state"] == "compiled_unchecked"
    assert summary_of(switch, 16)["verified"] is None


def test_a_step_that_checked_a_module_is_left_out_of_the_compiled_window():
    switch = switch_with_hooks("aot_eager")
    assert switch.probe is not None
    switch.probe.warmup = 0  # the window opens on step 1, while the module is checked
    train(switch, steps=13)
    # Window A (steps 1 to 4) compiled the module and checked it for a whole step after
    # its first checked call: fewer than 2 clean steps, so the job measures again (a
    # longer round after step 12) instead of comparing checked calls with eager ones.
    assert switch.probe.round == 2 and switch.probe.earlier_eager_steps == [5, 6, 7, 8]
    assert switch.decision is None


def test_a_check_the_jobs_end_cut_off_keeps_the_earlier_verdict():
    # Issue 41 (dcgan): both models passed their check, then a smaller last batch opened
    # a new check that the job's end cut off, and the summary said "not decided".
    switch = switch_with_hooks("aot_eager")
    model = train(switch, steps=4)
    model(torch.randn(3, 4)).pow(2).mean().backward()  # the last, smaller batch; no step
    (entry,) = switch.autocompile.compiled
    assert entry.checking and entry.verified is None and entry.rechecks == 1
    assert entry.state is ModuleState.CHECKING
    assert entry.state_at_end is ModuleState.COMPILED_VERIFIED
    summary = summary_of(switch, 4)
    assert summary["verified"].startswith("Net matched eager (")
    assert "not decided" not in summary["verified"]


def test_a_first_check_the_jobs_end_cut_off_is_not_decided():
    switch = switch_with_hooks("aot_eager")
    torch.manual_seed(0)
    model = Net()
    for _ in range(2):  # the hook compiles at the first call, checks from the second
        model(torch.randn(6, 4)).pow(2).mean().backward()  # the job ends inside step 1
    (entry,) = switch.autocompile.compiled
    assert entry.state is ModuleState.CHECKING and entry.state_at_end is ModuleState.CHECKING
    assert "not decided" in summary_of(switch, 0)["verified"]


@pytest.mark.parametrize(
    ("facts", "state"),
    [
        (ModuleFacts(), ModuleState.EAGER),
        (ModuleFacts(checking=True), ModuleState.CHECKING),
        (ModuleFacts(verified=True, calls=3), ModuleState.COMPILED_VERIFIED),
        (ModuleFacts(calls=3), ModuleState.COMPILED_UNCHECKED),  # verify=False
        (ModuleFacts(verified=True, calls=3, unchecked_graphs=1), ModuleState.COMPILED_UNCHECKED),
        (ModuleFacts(failed="verification: output 0 differs"), ModuleState.EAGER_BY_VERDICT),
        (ModuleFacts(calls=3, last_call_eager=True), ModuleState.EAGER_BY_VERDICT),  # a limit
        (ModuleFacts(calls=3, graphs_seen=0), ModuleState.EAGER_BY_VERDICT),
        (ModuleFacts(ran_aot=True, verified=True), ModuleState.COMPILED_VERIFIED),
    ],
)
def test_the_state_is_derived_from_the_modules_fields(facts, state):
    assert module_state(facts) is state
    assert state.runs_compiled is (state.value.startswith("compiled"))


@pytest.mark.parametrize(
    ("facts", "at_end"),
    [
        (ModuleFacts(checking=True), ModuleState.CHECKING),  # a first check: not decided
        (ModuleFacts(checking=True, rechecks=1, calls=4), ModuleState.COMPILED_VERIFIED),
        (
            ModuleFacts(checking=True, recompiled="requires_grad", calls=4),
            ModuleState.COMPILED_VERIFIED,
        ),
        (ModuleFacts(checking=True, verified=True, calls=4), ModuleState.COMPILED_VERIFIED),
        (
            ModuleFacts(checking=True, rechecks=1, failed="verification: x"),
            ModuleState.EAGER_BY_VERDICT,
        ),
    ],
)
def test_a_check_cut_off_by_the_jobs_end_keeps_the_verdict_before_it(facts, at_end):
    assert module_state(facts) in (ModuleState.CHECKING, ModuleState.EAGER_BY_VERDICT)
    assert module_state(facts, job_ended=True) is at_end
