"""The shared round: a fresh cache dir filled only from the shared cache the cold run wrote.

A fake runner stands in for the measurement processes (it writes files into its
cache dir as a compiler would); the shared cache is the container's real code
(:mod:`trcomp_container.caching.shared`) on a real directory.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import pytest

from trcomp_bench.harness import BenchOptions, RunFailed, run_benchmark
from trcomp_bench.results import markdown_table
from trcomp_bench.worker import RunSpec

Fake = Callable[..., dict[str, Any]]

# Where each backend's compiler keeps its cache, under the run's cache dir.
_CACHE_VAR = {
    "eager": "TORCHINDUCTOR_CACHE_DIR",
    "inductor": "TORCHINDUCTOR_CACHE_DIR",
    "xla": "XLA_PERSISTENT_CACHE_PATH",
    "jax": "JAX_COMPILATION_CACHE_DIR",
}


@dataclass
class Call:
    """One measurement the harness asked for."""

    backend: str
    cache_dir: Path  # the run's cache dir (what a job's live cache dir is)
    files: dict[str, bytes]  # what was in it when the run started
    env: dict[str, str]


@dataclass
class FakeCompiler:
    """A runner that writes a kernel into its cache dir the first time a pair runs."""

    fake_result: Fake
    compiles: bool = True
    fail_backend: str | None = None
    calls: list[Call] = field(default_factory=list)

    def __call__(self, spec: RunSpec, env: Mapping[str, str]) -> dict[str, Any]:
        compiler_dir = Path(env[_CACHE_VAR[spec.backend]])
        cache_dir = compiler_dir.parent
        files = {
            p.relative_to(cache_dir).as_posix(): p.read_bytes()
            for p in sorted(cache_dir.rglob("*"))
            if p.is_file()
        }
        self.calls.append(Call(spec.backend, cache_dir, files, dict(env)))
        runs = [c for c in self.calls if c.backend == spec.backend]
        if self.compiles and spec.backend != "eager":
            name = "cold-kernel" if len(runs) == 1 else f"warm-kernel-{len(runs)}"
            (compiler_dir / "k").mkdir(parents=True, exist_ok=True)
            (compiler_dir / "k" / name).write_bytes(f"{spec.backend} {name}".encode())
        if len(runs) > 1 and spec.backend == self.fail_backend:
            raise RunFailed("RuntimeError: the shared run broke", {"oom": False})
        result = self.fake_result([1.0, 0.9, 0.8], first=10.0 / len(runs))
        if spec.backend == "inductor":
            result["fxgraph_cache"] = {"hit": 3 if files else 0, "miss": 0 if files else 3}
        return result


def _options(**changes: Any) -> BenchOptions:
    base = BenchOptions(workloads=("mlp",), size="tiny", steps=8, warmup=3, repeats=1)
    return replace(base, **changes)


def test_the_shared_round_runs_last_on_a_fresh_dir_the_shared_cache_filled(
    fake_result: Fake,
) -> None:
    runner = FakeCompiler(fake_result)
    options = _options(backends=("eager", "inductor", "xla", "jax"))
    result = run_benchmark(options, progress=False, runner=runner)
    assert not result.errors
    order = [c.backend for c in runner.calls]
    # cold, warm (rotated by one), then the compiled backends once more (rotated by two)
    assert order == [
        "eager", "inductor", "xla", "jax",
        "inductor", "xla", "jax", "eager",
        "jax", "inductor", "xla",
    ]  # fmt: skip
    for backend in ("inductor", "xla", "jax"):
        cold, warm, shared = [c for c in runner.calls if c.backend == backend]
        assert cold.files == {} and warm.cache_dir == cold.cache_dir
        assert shared.cache_dir != cold.cache_dir
        # Only what the cold run compiled, read through the shared cache: not the warm run's.
        sub = Path(shared.env[_CACHE_VAR[backend]]).name
        assert shared.files == {f"{sub}/k/cold-kernel": f"{backend} cold-kernel".encode()}
    # A job with shared_cache on the jax engine turns JAX's XLA sub-caches off: every run.
    jax_runs = [c for c in runner.calls if c.backend == "jax"]
    assert all(c.env["JAX_PERSISTENT_CACHE_ENABLE_XLA_CACHES"] == "none" for c in jax_runs)
    assert all(c.env["JAX_COMPILATION_CACHE_DIR"] == str(c.cache_dir / "jax") for c in jax_runs)

    rows = {r.backend: r for r in result.rows}
    assert rows["eager"].first_step_shared_s is None and rows["eager"].shared_read is None
    inductor = rows["inductor"]
    assert (inductor.first_step_cold_s, inductor.first_step_warm_s) == (10.0, 5.0)
    assert inductor.first_step_shared_s == pytest.approx(10.0 / 3)
    assert inductor.shared_read is not None
    assert inductor.shared_read["bytes"] > 0
    read = {k: v for k, v in inductor.shared_read.items() if k != "bytes"}
    assert read == {"entries": 1, "files": 1, "fxgraph_hits": 3, "fxgraph_misses": 0}
    assert rows["xla"].shared_read is not None and rows["xla"].shared_read["files"] == 1
    assert "fxgraph_hits" not in rows["xla"].shared_read
    header = markdown_table(result.rows).splitlines()[0]
    assert "| first step warm (s) | first step warm, shared (s) | step (ms) |" in header


def test_without_the_shared_round_nothing_is_shared_and_the_column_is_not_there(
    fake_result: Fake,
) -> None:
    runner = FakeCompiler(fake_result)
    options = _options(backends=("eager", "inductor", "jax"), shared=False)
    result = run_benchmark(options, progress=False, runner=runner)
    assert not result.errors and len(runner.calls) == 6  # cold and warm only
    assert all("JAX_PERSISTENT_CACHE_ENABLE_XLA_CACHES" not in c.env for c in runner.calls)
    assert all(r.first_step_shared_s is None and r.shared_read is None for r in result.rows)
    assert "shared" not in markdown_table(result.rows)


def test_a_shared_read_that_finds_nothing_is_reported_not_timed(fake_result: Fake) -> None:
    runner = FakeCompiler(fake_result, compiles=False)  # the cold run writes no cache
    result = run_benchmark(_options(backends=("eager", "inductor")), progress=False, runner=runner)
    assert [c.backend for c in runner.calls] == ["eager", "inductor", "inductor", "eager"]
    error = result.errors["mlp/inductor (shared round)"]
    assert "gave a fresh cache dir no files" in error and "wrote 0 files" in error
    assert list(result.errors) == ["mlp/inductor (shared round)"]
    inductor = next(r for r in result.rows if r.backend == "inductor")
    assert inductor.first_step_shared_s is None  # not a cold number under the shared column
    assert inductor.shared_read == {"entries": 0, "files": 0, "bytes": 0}
    assert inductor.first_step_warm_s == 5.0  # the rest of the row stands
    assert "| n/a |" in markdown_table(result.rows).splitlines()[3]


def test_a_failing_shared_run_keeps_the_row_and_reports_the_error(fake_result: Fake) -> None:
    runner = FakeCompiler(fake_result, fail_backend="inductor")
    options = _options(backends=("inductor",), repeats=0)
    result = run_benchmark(options, progress=False, runner=runner)
    assert result.errors == {"mlp/inductor (shared round)": "RuntimeError: the shared run broke"}
    (row,) = result.rows
    assert row.first_step_shared_s is None
    assert row.shared_read is not None and row.shared_read["files"] == 1


def test_the_shared_run_counts_in_the_loss_difference_against_eager(fake_result: Fake) -> None:
    compiler = FakeCompiler(fake_result)

    def runner(spec: RunSpec, env: Mapping[str, str]) -> dict[str, Any]:
        result = compiler(spec, env)
        shared_run = len([c for c in compiler.calls if c.backend == spec.backend]) == 3
        if spec.backend == "inductor" and shared_run:  # cold, warm, then shared
            result["losses"] = [1.0, 0.9, 0.8 + 0.002]
        return result

    result = run_benchmark(_options(backends=("eager", "inductor")), progress=False, runner=runner)
    assert not result.errors
    assert [r.max_loss_diff for r in result.rows] == [0.0, pytest.approx(0.002)]
