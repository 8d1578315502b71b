"""Rounds: the interleaved order, each round's ratio, the spread and the load flag.

Timings and load averages are injected (a fake runner, a fake load reader): no
clock is compared with anything here.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable, Mapping
from dataclasses import replace
from typing import Any

import pytest

from trcomp_bench import cli, harness
from trcomp_bench.harness import BenchOptions, run_benchmark
from trcomp_bench.rounds import (
    default_load_bound,
    judge,
    load_average,
    median_step,
    ratio_and_spread,
    round_order,
    round_ratios,
)
from trcomp_bench.worker import RunSpec

Fake = Callable[..., dict[str, Any]]


def test_round_order_rotates_so_pairs_alternate() -> None:
    assert [round_order(["A", "B"], r) for r in range(4)] == [
        ["A", "B"], ["B", "A"], ["A", "B"], ["B", "A"],
    ]  # fmt: skip
    assert round_order(["A", "B", "C"], 4) == ["B", "C", "A"]
    assert round_order([], 3) == []


def test_round_ratios_pair_each_round_with_eagers_run_of_the_same_round() -> None:
    # A burst during the first round's eager run: 553 ms instead of 44.
    ratios = round_ratios([0.553, 0.044, 0.043], [0.046, 0.046, 0.045])
    assert ratios == pytest.approx([0.553 / 0.046, 0.044 / 0.046, 0.043 / 0.045])
    median, low, high = ratio_and_spread(ratios)
    assert median == pytest.approx(0.044 / 0.046) and (low, high) == (min(ratios), max(ratios))
    assert round_ratios([0.04, 0.04], [0.02]) == [2.0]  # a round only one side has: left out
    with pytest.raises(ValueError, match="at least one round"):
        ratio_and_spread([])
    assert median_step({"step_times_s": [0.3, 0.1, 0.2]}) == 0.2


def test_judge_flags_a_load_change_and_disagreeing_rounds() -> None:
    quiet = judge([0.95, 0.97, 1.0], [0.4, 0.9, 1.2, 1.6], load_bound=2.0)
    assert quiet is None
    assert judge([0.95, 1.0], [1.0, 4.5], load_bound=2.0) == (
        "load changed (1.0 to 4.5, bound 2): ratios unreliable"
    )
    assert judge([12.0, 0.96, 0.95], [1.0, 1.5], load_bound=2.0) == (
        "rounds disagree (0.95x to 12.00x, bound 25%): ratios unreliable"
    )
    both = judge([12.0, 0.96], [0.5, 8.0], load_bound=2.0, spread_bound=0.1)
    assert both == (
        "load changed (0.5 to 8.0, bound 2); rounds disagree (0.96x to 12.00x, bound 10%): "
        "ratios unreliable"
    )
    # Unknown loads (a system without getloadavg) and no ratios (eager's row) judge nothing.
    assert judge(None, [None, None], load_bound=2.0) is None
    assert judge([], [], load_bound=0.0) is None


def test_the_load_is_read_from_the_system() -> None:
    assert default_load_bound() >= 1.0
    load = load_average()
    assert load is None or load >= 0.0


def _burst_runner(fake_result: Fake, calls: list[tuple[str, str]]) -> harness.Runner:
    """Eager's first round ran during a burst of load; every other run was quiet."""

    def runner(spec: RunSpec, env: Mapping[str, str]) -> dict[str, Any]:
        calls.append((spec.workload, spec.backend))
        round_no = sum(1 for call in calls if call == calls[-1]) - 1
        burst = spec.backend == "eager" and round_no == 0
        step = 0.553 if burst else 0.044 if spec.backend == "eager" else 0.046
        return fake_result([1.0, 0.9], step=step)

    return runner


def test_eager_and_each_compiler_run_back_to_back_in_every_round(
    fake_result: Fake, monkeypatch: pytest.MonkeyPatch
) -> None:
    loads = itertools.count(start=1.0, step=0.1)  # a slowly rising load, read around each run
    monkeypatch.setattr(harness, "load_average", lambda: round(next(loads), 2))
    calls: list[tuple[str, str]] = []
    options = BenchOptions(
        workloads=("gpt2", "mlp"), backends=("eager", "inductor"), size="tiny",
        steps=8, warmup=3, repeats=2, shared=False, load_bound=100.0,
    )  # fmt: skip
    assert options.rounds == 3
    result = run_benchmark(options, progress=False, runner=_burst_runner(fake_result, calls))
    assert calls == [
        ("gpt2", "eager"), ("gpt2", "inductor"), ("mlp", "eager"), ("mlp", "inductor"),
        ("gpt2", "inductor"), ("gpt2", "eager"), ("mlp", "inductor"), ("mlp", "eager"),
        ("gpt2", "eager"), ("gpt2", "inductor"), ("mlp", "eager"), ("mlp", "inductor"),
    ]  # fmt: skip
    eager, inductor = result.rows[:2]
    assert inductor.round_step_s == [0.046] * 3 and eager.round_step_s == [0.553, 0.044, 0.044]
    assert inductor.vs_eager_rounds == pytest.approx([0.553 / 0.046] + [0.044 / 0.046] * 2)
    # The row's ratio is the median round's (0.96x), not the burst's 12x.
    assert inductor.vs_eager(None) == pytest.approx(0.044 / 0.046)
    assert inductor.unreliable == (
        "rounds disagree (0.96x to 12.02x, bound 25%): ratios unreliable"
    )
    assert eager.vs_eager_rounds is None and eager.unreliable is None
    # Before and after each run, in the order they ran: gpt2/eager first, then gpt2/inductor.
    assert eager.round_load == [[1.0, 1.1], [2.0, 2.1], [2.6, 2.7]]
    assert inductor.round_load == [[1.2, 1.3], [1.8, 1.9], [2.8, 2.9]]


def test_a_load_change_flags_the_rows_it_touched(
    fake_result: Fake, monkeypatch: pytest.MonkeyPatch
) -> None:
    loads = iter([0.5, 0.6, 0.6, 0.7, 0.7, 5.0, 5.5, 5.2])  # other work starts in round 2
    monkeypatch.setattr(harness, "load_average", lambda: next(loads))
    options = BenchOptions(
        workloads=("mlp",), backends=("eager", "inductor"), size="tiny", steps=8, warmup=3,
        repeats=1, shared=False, load_bound=2.0,
    )  # fmt: skip
    result = run_benchmark(options, progress=False, runner=lambda s, e: fake_result([1.0]))
    # Round 2 ran inductor, then eager: the load rose during inductor's run.
    assert result.rows[0].round_load == [[0.5, 0.6], [5.5, 5.2]]
    assert result.rows[1].round_load == [[0.6, 0.7], [0.7, 5.0]]
    expected = "load changed (0.5 to 5.5, bound 2): ratios unreliable"
    assert [row.unreliable for row in result.rows] == [expected, expected]
    assert result.rows[1].vs_eager_rounds == [1.0, 1.0]  # the ratios agree; the load did not


def test_the_command_line_takes_rounds_and_bounds(
    fake_result: Fake, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    seen: list[BenchOptions] = []
    calls: list[tuple[str, str]] = []

    def fake_benchmark(options: BenchOptions, progress: bool = True) -> harness.BenchResult:
        seen.append(options)
        runner = _burst_runner(fake_result, calls)
        return run_benchmark(replace(options, size="tiny"), progress=False, runner=runner)

    monkeypatch.setattr(harness, "run_benchmark", fake_benchmark)
    argv = ["--workloads", "mlp", "--backends", "eager,inductor", "--no-shared", "--no-progress"]
    assert cli.main([*argv, "--rounds", "4", "--load-bound", "50", "--spread-bound", "0.5"]) == 0
    assert (seen[0].repeats, seen[0].load_bound, seen[0].spread_bound) == (3, 50.0, 0.5)
    out, err = capsys.readouterr()
    assert "| ratios |" in out.splitlines()[0]
    assert "| mlp | inductor |" in out and "rounds disagree" in out
    assert "trcomp bench: mlp/inductor: rounds disagree" in err
    assert cli.main([*argv, "--repeats", "1"]) == 0 and seen[1].rounds == 2
    assert cli.main(argv) == 0 and seen[2].rounds == 3  # the default: three rounds
    with pytest.raises(SystemExit):
        cli.main([*argv, "--rounds", "2", "--repeats", "1"])  # one or the other
    with pytest.raises(SystemExit):
        cli.main([*argv, "--rounds", "0"])
