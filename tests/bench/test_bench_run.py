"""Real measurements: worker processes, the command line, the GPU script's dry run."""

from __future__ import annotations

import argparse
import importlib.util
import json
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from tests.helpers import cxx_cache, vec_isa
from trcomp_bench import cli, gpu_h200, launch
from trcomp_bench.backends import backend_env
from trcomp_bench.harness import RunFailed, run_measurement
from trcomp_bench.results import ROW_KEYS
from trcomp_bench.worker import RunSpec, measure

pytestmark = pytest.mark.slow

HERE = Path(__file__).resolve().parent
# One intra-op thread in the children these tests start: see conftest.ONE_THREAD.
ONE_THREAD = {"OMP_NUM_THREADS": "1"}


def test_measure_in_process_eager(clean_env: pytest.MonkeyPatch) -> None:
    clean_env.setenv("USE_TORCH_XLA", "0")
    result = measure(RunSpec(backend="eager", batch_size=8, workload="mlp", size="tiny", steps=5))
    assert len(result["losses"]) == 5 and result["device"].startswith("cpu")
    # Counted, not compared with a clock: one first step, then one time per step after it.
    assert isinstance(result["first_step_s"], float) and len(result["step_times_s"]) == 4
    assert result["peak_mem_mb"] > 10


def test_a_failing_measurement_reports_the_error(
    tmp_path: Path, clean_env: pytest.MonkeyPatch
) -> None:
    spec = RunSpec(backend="eager", batch_size=2, model="no_such_module_xyz:make", steps=2)
    with pytest.raises(RunFailed, match="No module named 'no_such_module_xyz'"):
        run_measurement(spec, backend_env("eager", tmp_path, {"PATH": "/usr/bin:/bin"}))


def test_register_mounts_bench_on_a_parent_parser() -> None:
    parser = argparse.ArgumentParser(prog="trcomp")
    cli.register(parser.add_subparsers(dest="command"))
    args = parser.parse_args(["bench", "--workloads", "gpt2,mlp", "--backends", "eager"])
    assert args.func is cli.run and args.workloads == ("gpt2", "mlp")
    assert cli.main(["--workloads", "resnet", "--backends", "eager"]) == 2


@pytest.mark.slow
@pytest.mark.cold_compile
def test_bench_a_user_model_eager_against_inductor_cold_warm_and_shared(
    tmp_path: Path,
    clean_env: pytest.MonkeyPatch,
    trusted_isa: None,
    capsys: pytest.CaptureFixture[str],
) -> None:
    out = tmp_path / "out"
    code = cli.main([
        "--model", f"{HERE / 'my_model.py'}:make", "--backends", "eager,inductor",
        "--batch-size", "4", "--steps", "3", "--warmup", "1", "--repeats", "1",
        "--json", str(out / "rows.json"), "--markdown", str(out / "rows.md"),
        "--png", str(out / "rows.png"), "--no-progress",
    ])  # fmt: skip
    assert code == 0, capsys.readouterr().err
    rows = json.loads((out / "rows.json").read_text())
    assert [r["backend"] for r in rows] == ["eager", "inductor"]
    assert all(list(r) == list(ROW_KEYS) for r in rows)
    eager, inductor = rows
    assert eager["max_loss_diff"] == 0.0  # eager is deterministic run to run
    assert inductor["max_loss_diff"] < 1e-4  # fp32, no dropout: the same training
    # The warm round ran (its first step is there) and a steady step was taken.
    assert isinstance(inductor["first_step_warm_s"], float)
    assert isinstance(inductor["step_s"], float)
    # The shared round: another, empty cache dir that only the shared cache the cold
    # run wrote filled; its process found every FX graph there.
    assert isinstance(inductor["first_step_shared_s"], float)
    read = inductor["shared_read"]
    assert read["entries"] == 1 and read["files"] > 0 and read["bytes"] > 0
    assert read["fxgraph_hits"] > 0 and read["fxgraph_misses"] == 0, read
    assert eager["first_step_shared_s"] is None and eager["shared_read"] is None
    printed = capsys.readouterr().out
    assert "| inductor |" in printed and "| first step warm, shared (s) |" in printed
    assert (out / "rows.png").stat().st_size > 1000 and (out / "rows.md").exists()


def test_gpu_script_math_and_report() -> None:
    # 124M params, 16k tokens per step, 0.1 s per step: 6*N*T/t = 1.19e15 FLOP/s.
    util = gpu_h200.mfu(124_000_000, 16_384, 0.1)
    assert util == pytest.approx(6 * 124e6 * 16_384 / 0.1 / 989e12)
    results = [
        gpu_h200.GpuResult("gpt2-small", "eager", 124_000_000, 16_384, 2.0, 0.2, 10.0),
        gpu_h200.GpuResult("gpt2-small", "inductor", 124_000_000, 16_384, 60.0, 0.1, 8.0),
    ]
    report = gpu_h200.format_report(results)
    assert "989 TFLOP/s" in report and "| 2.00x |" in report


def test_gpu_script_runs_backend_by_backend_with_max_autotune_last() -> None:
    order = gpu_h200.run_order(["gpt2-small", "bert-base"], ["max-autotune", "eager", "inductor"])
    assert order == [
        ("gpt2-small", "eager"),
        ("bert-base", "eager"),
        ("gpt2-small", "inductor"),
        ("bert-base", "inductor"),
        ("gpt2-small", "max-autotune"),
        ("bert-base", "max-autotune"),
    ]


@pytest.mark.slow
def test_gpu_script_dry_run_on_cpu(tmp_path: Path) -> None:
    sdk = Path(gpu_h200.__file__).parents[1]
    proc = subprocess.run(
        [sys.executable, "-m", "trcomp_bench.gpu_h200", "--dry-run", "--backends", "eager",
         "--steps", "2", "--warmup", "1", "--out", str(tmp_path / "gpu")],
        capture_output=True, text=True, timeout=300,
        env={"PATH": "/usr/bin:/bin", "USE_TORCH_XLA": "0", "PYTHONPATH": str(sdk), **ONE_THREAD},
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert "| gpt2-small | eager |" in proc.stdout and "| bert-base | eager |" in proc.stdout
    body = json.loads((tmp_path / "gpu.json").read_text())
    assert {e["result"]["model"] for e in body["results"]} == {"gpt2-small", "bert-base"}
    assert body["meta"]["versions"]["torch"].startswith("2.9")  # versions are recorded
    assert "triton" in body["meta"]["versions"]
    assert "| gpt2-small | eager |" in (tmp_path / "gpu.md").read_text()


@dataclass(frozen=True)
class GpuScriptRun:
    """What one run of the GPU script left: its output, and where it wrote."""

    proc: subprocess.CompletedProcess[str]
    out: Path
    jax: bool  # whether the jax engine's runs were in it (torchax installed)

    @property
    def results(self) -> list[dict[str, Any]]:
        return list(json.loads(self.out.with_suffix(".json").read_text())["results"])


@pytest.fixture(scope="module")
def gpu_script_gpt2(
    tmp_path_factory: pytest.TempPathFactory, warm_compile_cache: Path
) -> GpuScriptRun:
    """One dry run of the GPU script on gpt2-small, shared by the tests that read it.

    The jax engine cold and warm (where torchax is installed; named out of order on
    purpose) and the zero-code loop under the start-up hook; no eager run (the rows'
    ratio to eager is none of these tests' business: test_gpu_script_dry_run_on_cpu
    runs eager on both models, test_gpu_script_runs_backend_by_backend_with_max_autotune_last
    checks that eager runs first). 15 steps in
    all (one warm-up step, 14 timed): what the hook's own eager-against-compiled
    measurement needs (warm-up 3, then windows of 4 compiled, 4 eager, 4 compiled).
    The jax engine's cache is the run's own (cold, then warm); the zero-code run's
    inductor compiles go to the tests' warm cache (no assertion is about them being cold),
    its C++ builds through the tests' g++ wrapper (tests/helpers/cxx_cache.py).
    """
    jax = importlib.util.find_spec("torchax") is not None
    backends = "zero-code,jax-warm,jax" if jax else "zero-code"
    sdk = Path(gpu_h200.__file__).parents[1]
    container = sdk.parent / "container"
    out = tmp_path_factory.mktemp("gpu-script") / "gpu"
    proc = subprocess.run(
        [sys.executable, "-m", "trcomp_bench.gpu_h200", "--dry-run", "--models", "gpt2-small",
         "--backends", backends, "--steps", "14", "--warmup", "1", "--budget-s", "1500",
         "--out", str(out)],
        capture_output=True, text=True, timeout=1500,
        env={**cxx_cache.environment("/usr/bin:/bin"), "USE_TORCH_XLA": "0",
             "PYTHONPATH": f"{sdk}:{container}", **ONE_THREAD, **vec_isa.environment(),
             "TORCHINDUCTOR_CACHE_DIR": str(warm_compile_cache)},
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-2000:]
    return GpuScriptRun(proc, out, jax)


@pytest.mark.slow
@pytest.mark.cold_compile
def test_gpu_script_runs_the_jax_engine_cold_then_warm(gpu_script_gpt2: GpuScriptRun) -> None:
    if not gpu_script_gpt2.jax:
        pytest.skip("torchax is not installed")
    backends = [e["backend"] for e in gpu_script_gpt2.results]
    # Cold before warm, in BACKENDS' order, whatever order --backends names them in.
    assert backends == ["jax", "jax-warm", "zero-code"]
    stdout = gpu_script_gpt2.proc.stdout
    assert "| gpt2-small | jax | bf16 weights |" in stdout
    assert "| gpt2-small | jax-warm | bf16 weights |" in stdout
    cache = Path(f"{gpu_script_gpt2.out}-jax-cache") / "gpt2-small"
    assert any(p.is_file() for p in cache.rglob("*"))  # the cold run filled JAX's cache


@pytest.fixture(scope="module")
def my_model_eager(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """One eager worker run of my_model: the losses the xla and jax engines must match."""
    spec = RunSpec(backend="eager", batch_size=4, model=f"{HERE / 'my_model.py'}:make", steps=4)
    cache = tmp_path_factory.mktemp("eager")
    return run_measurement(
        spec, backend_env("eager", cache, {"PATH": "/usr/bin:/bin", **ONE_THREAD})
    )


@pytest.mark.slow
def test_xla_runs_through_the_runtime_helpers_and_matches_eager(
    tmp_path: Path, clean_env: pytest.MonkeyPatch, my_model_eager: dict[str, Any]
) -> None:
    spec = RunSpec(backend="xla", batch_size=4, model=f"{HERE / 'my_model.py'}:make", steps=4)
    base = {"PATH": "/usr/bin:/bin", **ONE_THREAD}
    result = run_measurement(spec, backend_env("xla", tmp_path / "xla", base))
    assert result["device"].startswith("xla:")
    assert any((tmp_path / "xla" / "xla").iterdir())  # the persistent cache was written
    xla, eager = result["losses"], my_model_eager["losses"]
    diffs = [abs(a - b) for a, b in zip(xla, eager, strict=True)]
    assert max(diffs) < 1e-4


@pytest.mark.slow
def test_find_batch_size_command_on_cpu(
    tmp_path: Path, clean_env: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "bs.json"
    args = ["--find-batch-size", "--workloads", "mlp", "--size", "tiny", "--backends", "eager"]
    args += ["--memory-budget-mb", "100000", "--max-batch-size", "2", "--json", str(out)]
    assert cli.main(args) == 0
    (found,) = json.loads(out.read_text())
    assert found["batch_size"] == 2 and [t["batch_size"] for t in found["trials"]] == [1, 2]
    assert found["lr_linear"] == pytest.approx(1e-3 * 2 / 8)
    assert "| eager | cpu" in capsys.readouterr().out


@pytest.mark.slow
def test_jax_engine_runs_through_compile_step_and_matches_eager(
    tmp_path: Path, clean_env: pytest.MonkeyPatch, my_model_eager: dict[str, Any]
) -> None:
    if importlib.util.find_spec("torchax") is None:
        pytest.skip("torchax is not installed")
    spec = RunSpec(backend="jax", batch_size=4, model=f"{HERE / 'my_model.py'}:make", steps=4)
    base = {"PATH": "/usr/bin:/bin", **ONE_THREAD}
    result = run_measurement(spec, backend_env("jax", tmp_path / "jax", base))
    assert result["device"].startswith("jax:")
    assert any((tmp_path / "jax" / "jax").iterdir())  # JAX's persistent cache was written
    jax, eager = result["losses"], my_model_eager["losses"]
    assert max(abs(a - b) for a, b in zip(jax, eager, strict=True)) < 1e-4


@pytest.mark.slow
def test_launch_overhead_in_process_mode(clean_env: pytest.MonkeyPatch) -> None:
    clean_env.setenv("SAGEMAKER_SUPPRESS_V2_WARNING", "1")
    rows = launch.measure(repeats=1, docker=False)
    assert [(r["launch"], r["compiler"], r["repeats"]) for r in rows] == [("process mode", True, 1)]
    assert launch.markdown_table(rows).startswith(
        "| launch | compiler | repeats | median wall (s) | median overhead (s) |\n"
        "|---|---|---|---|---|\n| process mode | on | 1 | "
    )


@pytest.mark.slow
def test_gpu_script_runs_a_plain_loop_that_the_hook_compiles_and_measures(
    gpu_script_gpt2: GpuScriptRun,
) -> None:
    (entry,) = [e for e in gpu_script_gpt2.results if e["backend"] == "zero-code"]
    found = entry["job_speedup"]
    assert [m["module"] for m in found["compiled_modules"]] == ["GPT2LMHeadModel"]
    assert found["graphs"] >= 1 and found["kept"] in ("compiled", "eager")
    assert "gpt2-small/zero-code: the job measured" in gpu_script_gpt2.proc.stdout
