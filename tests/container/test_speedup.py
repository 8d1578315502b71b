"""Eager against compiled in the job's process: the rule, the state machine, the ranks, the store.

The decision is tested with injected step timings, never with wall time: a
simulated clock feeds the real state machine, and a real module compiled with
torch shows which stance each step ran under.
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
from pathlib import Path

import pytest

from tests.helpers.hook import hook_module
from trcomp.contract.runtime_config import RuntimeConfig
from trcomp_container.environment import HOOK_DIR

speedup = hook_module("trcomp_speedup")
hook_module("trcomp_autocompile")
switch_module = hook_module("trcomp_switch")


@pytest.mark.parametrize(
    ("eager", "compiled", "keep_faster", "kept"),
    [
        ([0.10] * 4, [0.08] * 4, True, "compiled"),  # compiled faster
        ([0.10] * 4, [0.102] * 4, True, "compiled"),  # within the 5% noise margin
        ([0.10] * 4, [0.12] * 4, True, "eager"),  # slower beyond noise: keep eager
        ([0.10] * 4, [0.12] * 4, False, "compiled"),  # explicit backend: report only
    ],
)
def test_the_rule_keeps_the_faster_beyond_noise(eager, compiled, keep_faster, kept):
    decision = speedup.decide(eager, compiled, keep_faster=keep_faster)
    assert decision.keep == kept
    assert decision.speedup == pytest.approx(eager[0] / compiled[0])
    assert f"{decision.speedup:.2f}x" in decision.reason


def test_the_rule_uses_medians_so_one_slow_step_does_not_decide():
    decision = speedup.decide([0.10, 0.10, 0.10, 5.0], [0.08, 0.08, 3.0, 0.08], keep_faster=True)
    assert decision.keep == "compiled" and decision.speedup == pytest.approx(1.25)


def test_keep_faster_defaults_to_on_for_auto_and_off_for_an_explicit_backend():
    assert RuntimeConfig(requested_backend="auto").keeps_faster
    assert not RuntimeConfig(requested_backend="inductor").keeps_faster
    assert RuntimeConfig(requested_backend="inductor", keep_faster=True).keeps_faster


class Clock:
    """The step clock, simulated: intervals are what the test says the steps took."""

    def __init__(self, durations: dict[int, float]) -> None:
        self.durations = durations
        self.reads = 0

    def intervals(self) -> list[float]:
        self.reads += 1
        last = max(self.durations)
        return [self.durations.get(step, 0.05) for step in range(2, last + 1)]


def compiled_marker():
    """A real module compiled by torch: returns 1 when its compiled graph ran, 0 eager."""
    import torch

    class Marker(torch.nn.Module):
        def forward(self, x):
            return x * 0 + (1.0 if torch.compiler.is_compiling() else 0.0)

    marker = Marker()
    marker.compile(backend="eager")
    return lambda: int(marker(torch.zeros(1)).item())


def drive(config: RuntimeConfig, durations: dict[int, float], steps: int = 16):
    import torch

    runs = compiled_marker()
    assert runs() == 1  # compiled before the job's steps start
    switch = switch_module.Switch(torch, config, environ={})
    clock = Clock(durations)
    ran = {}
    try:
        for step in range(1, steps + 1):
            ran[step] = runs()
            switch.on_step(step, compile_events=1 if step >= 2 else 0, clock=clock)
        after = runs()
    finally:
        torch.compiler.set_stance("default")
    return switch, ran, after, clock


def test_eager_steps_run_eager_and_auto_keeps_eager_when_compiled_is_slower():
    config = RuntimeConfig(enabled=True, backend="inductor", engine="inductor", auto_compile=False)
    slow_compiled = {step: (0.10 if step in (8, 9, 10, 11) else 0.20) for step in range(2, 17)}
    switch, ran, after, clock = drive(config, slow_compiled)
    # The measurement's eager steps, then every step after the decision at step 15.
    assert [step for step, compiled in ran.items() if not compiled] == [8, 9, 10, 11, 16]
    assert switch.decision.keep == "eager" and switch.decision.speedup == pytest.approx(0.5)
    assert after == 0
    assert clock.reads == 1  # one synchronization for the whole measurement
    report = switch.report(wall_s=10.0)["speedup"]
    assert report["compiled_steps"] == [4, 5, 6, 7, 12, 13, 14, 15]
    assert report["cost_s"] == 0.0  # eager was the faster: measuring cost nothing


def test_an_explicit_backend_keeps_compiling_and_reports_the_cost():
    config = RuntimeConfig(
        enabled=True,
        backend="inductor",
        engine="inductor",
        requested_backend="inductor",
        auto_compile=False,
    )
    fast_compiled = {step: (0.30 if step in (8, 9, 10, 11) else 0.10) for step in range(2, 17)}
    switch, _, after, _ = drive(config, fast_compiled)
    assert switch.decision.keep == "compiled" and after == 1
    report = switch.report(wall_s=8.0)["speedup"]
    assert report["cost_s"] == pytest.approx(4 * 0.2)
    assert report["cost_share"] == pytest.approx(0.1)


def test_a_job_that_recompiles_every_step_is_not_measured():
    probe = speedup.SpeedupProbe()
    for step in range(1, 80):
        probe.on_step(step, compile_events=step, finish=lambda m: pytest.fail("measured"))
    assert probe.phase == "done" and "recompiles" in probe.not_measured


def test_nothing_compiled_is_not_measured():
    probe = speedup.SpeedupProbe()
    for step in range(1, 80):
        probe.on_step(step, compile_events=0, finish=lambda m: pytest.fail("measured"))
    assert probe.not_measured == "nothing was compiled in the first steps"


def test_the_store_keeps_decisions_by_fingerprint_and_survives_a_torn_file(tmp_path):
    store = speedup.DecisionStore(tmp_path / "trcomp" / "speedup.json")
    decision = speedup.decide([0.1], [0.2], keep_faster=True)
    key = speedup.fingerprint({"model": "TinyLM[...]", "torch": "2.9.0"})
    assert store.load(key) is None
    store.save(key, decision)
    loaded = store.load(key)
    assert loaded.keep == "eager" and loaded.source == "stored"
    assert store.load(speedup.fingerprint({"model": "TinyLM[...]", "torch": "2.10.0"})) is None
    store.path.write_text('{"' + key + '": {"keep": ')  # torn: another writer died midway
    assert store.load(key) is None


AGREE = """
import json, os, sys
import torch.distributed as dist
import trcomp_switch, trcomp_speedup
dist.init_process_group("gloo")
rank = dist.get_rank()
# Rank 0 measured compiled faster, rank 1 slower: the job must still decide once.
eager, compiled = [(0.10, 0.09), (0.10, 0.20)][rank]
agreed = trcomp_speedup.agree(eager, compiled, trcomp_switch._reduce_max())
decision = trcomp_speedup.decide([agreed[0]], [agreed[1]], keep_faster=True)
print(json.dumps({"rank": rank, "agreed": agreed, "keep": decision.keep}))
dist.destroy_process_group()
"""


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@pytest.mark.slow
def test_the_ranks_agree_on_the_slowest_ranks_numbers_over_gloo():
    port = str(free_port())
    children = []
    for rank in range(2):
        env = {
            **os.environ,
            "PYTHONPATH": os.pathsep.join([str(HOOK_DIR), *sys.path]),
            "RANK": str(rank),
            "WORLD_SIZE": "2",
            "MASTER_ADDR": "127.0.0.1",
            "MASTER_PORT": port,
        }
        env.pop("TRCOMP_METRICS_DIR", None)
        children.append(
            subprocess.Popen(
                [sys.executable, "-c", AGREE], env=env, stdout=subprocess.PIPE, text=True
            )
        )
    results = []
    for child in children:
        out, _ = child.communicate(timeout=120)
        assert child.returncode == 0
        results.append(json.loads(out.strip().splitlines()[-1]))
    assert [r["agreed"] for r in results] == [[0.10, 0.20], [0.10, 0.20]]
    assert [r["keep"] for r in results] == ["eager", "eager"]


def test_engines_without_eager_in_process_say_why(tmp_path: Path):
    import torch

    config = RuntimeConfig(enabled=True, backend="xla", engine="torch_xla")
    report = switch_module.Switch(torch, config, environ={}).report(wall_s=1.0)
    assert report["speedup"]["decision"] is None
    assert "torch-xla" in report["speedup"]["not_measured"]
