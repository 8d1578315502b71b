"""The harness's bookkeeping (fake runner), and the batch-size finder around it."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import replace
from typing import Any

import pytest

from trcomp_bench.batchsize import find_batch_size
from trcomp_bench.harness import BenchOptions, RunFailed, run_benchmark
from trcomp_bench.worker import RunSpec

Fake = Callable[..., dict[str, Any]]


def quick_options(**changes: Any) -> BenchOptions:
    """Small settings (tiny models, few steps), with ``changes``."""
    return replace(BenchOptions(size="tiny", steps=8, warmup=3, repeats=1), **changes)


def test_rounds_are_interleaved_and_caches_go_cold_then_warm(fake_result: Fake) -> None:
    calls: list[tuple[str, str, str]] = []
    seen_cache: dict[str, list[str]] = {}

    def runner(spec: RunSpec, env: Mapping[str, str]) -> dict[str, Any]:
        calls.append((spec.workload, spec.backend, env["TRCOMP_CONFIG"]))
        cache = env.get("TORCHINDUCTOR_CACHE_DIR") or env.get("XLA_PERSISTENT_CACHE_PATH", "")
        seen_cache.setdefault(f"{spec.workload}/{spec.backend}", []).append(cache)
        first = 10.0 if len(seen_cache[f"{spec.workload}/{spec.backend}"]) == 1 else 2.0
        return fake_result([1.0, 0.9, 0.8], first=first)

    options = quick_options(
        workloads=("mlp", "gpt2"), backends=("eager", "inductor", "xla"), shared=False
    )
    result = run_benchmark(options, progress=False, runner=runner)
    order = [(w, b) for w, b, _ in calls]
    assert order[:6] == [
        ("mlp", "eager"), ("mlp", "inductor"), ("mlp", "xla"),
        ("gpt2", "eager"), ("gpt2", "inductor"), ("gpt2", "xla"),
    ]  # fmt: skip
    assert order[6:9] == [("mlp", "inductor"), ("mlp", "xla"), ("mlp", "eager")]  # rotated
    assert all(len(set(dirs)) == 1 and len(dirs) == 2 for dirs in seen_cache.values())
    assert len({dirs[0] for dirs in seen_cache.values()}) == 6  # one cache per pair
    assert not result.errors and len(result.rows) == 6
    row = result.rows[1]
    assert (row.workload, row.backend, row.first_step_cold_s, row.first_step_warm_s) == (
        "mlp", "inductor", 10.0, 2.0,
    )  # fmt: skip
    assert row.step_s == 0.01 and row.samples_per_s == pytest.approx(64 / 0.01)
    assert row.max_loss_diff == 0.0
    assert len(calls) == 12 and row.first_step_shared_s is None and row.shared_read is None


def test_loss_difference_is_against_eager_and_failures_drop_the_row(fake_result: Fake) -> None:
    def runner(spec: RunSpec, env: Mapping[str, str]) -> dict[str, Any]:
        if spec.backend == "xla":
            raise RunFailed("ImportError: no torch_xla", {"oom": False})
        shift = 0.001 if spec.backend == "inductor" else 0.0
        return fake_result([1.0, 0.9 + shift, 0.8])

    options = quick_options(
        workloads=("mlp",), backends=("eager", "inductor", "xla"), repeats=2, shared=False
    )
    result = run_benchmark(options, progress=False, runner=runner)
    assert [r.backend for r in result.rows] == ["eager", "inductor"]
    assert result.rows[1].max_loss_diff == pytest.approx(0.001)
    assert result.errors == {"mlp/xla": "ImportError: no torch_xla"}


def test_without_eager_there_is_no_loss_difference(fake_result: Fake) -> None:
    options = quick_options(workloads=("mlp",), backends=("inductor",), repeats=0, shared=False)
    result = run_benchmark(options, progress=False, runner=lambda s, e: fake_result([1.0]))
    assert result.rows[0].max_loss_diff is None and result.rows[0].first_step_warm_s is None


def test_options_check_names_before_anything_runs() -> None:
    with pytest.raises(ValueError, match="unknown workload 'resnet'"):
        BenchOptions(workloads=("resnet",)).specs()
    with pytest.raises(ValueError, match="unknown backend 'tvm'"):
        BenchOptions(backends=("tvm",)).specs()
    specs = BenchOptions(model="pkg.mod:make", backends=("eager",), batch_size=4).specs()
    assert [(s.model, s.batch_size) for s in specs] == [("pkg.mod:make", 4)]


def test_find_batch_size_against_a_memory_budget(fake_result: Fake) -> None:
    def runner(spec: RunSpec, env: Mapping[str, str]) -> dict[str, Any]:
        return {**fake_result([1.0]), "peak_mem_mb": 500.0 + 10.0 * spec.batch_size}

    found = find_batch_size("eager", workload="mlp", memory_budget_mb=1000, runner=runner)
    assert found.batch_size == 50 and found.device == "cpu:2t"
    assert found.lr_linear == pytest.approx(1e-3 * 50 / 8)
    assert found.lr_sqrt == pytest.approx(1e-3 * (50 / 8) ** 0.5)
    assert all(t.fits == (t.batch_size <= 50) for t in found.trials)
    assert any("budget" in t.reason for t in found.trials if not t.fits)


def test_find_batch_size_on_cuda_stops_at_out_of_memory(fake_result: Fake) -> None:
    def runner(spec: RunSpec, env: Mapping[str, str]) -> dict[str, Any]:
        if spec.batch_size > 96:
            raise RunFailed("OutOfMemoryError: CUDA out of memory", {"oom": True})
        return {**fake_result([1.0]), "device": "cuda:NVIDIA H200"}

    found = find_batch_size("inductor", workload="gpt2", runner=runner, limit=512)
    assert found.batch_size == 96


def test_find_batch_size_needs_a_budget_on_cpu_and_keeps_real_errors(fake_result: Fake) -> None:
    with pytest.raises(ValueError, match="--memory-budget-mb"):
        find_batch_size("eager", runner=lambda s, e: fake_result([1.0]))

    def broken(spec: RunSpec, env: Mapping[str, str]) -> dict[str, Any]:
        raise RunFailed("TypeError: forward() got an unexpected keyword", {"oom": False})

    with pytest.raises(RunFailed, match="TypeError"):
        find_batch_size("eager", memory_budget_mb=1000, runner=broken)
