"""``make gpu-check``: its CPU dry run passes, and results are written as they come."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.helpers import forkserver
from trcomp_bench.gpu_check import BUDGET_S, CHECKS
from trcomp_bench.runs import Job, ResultLog, run_capped, run_jobs

ROOT = Path(__file__).parents[2]


def test_checks_run_cheapest_first() -> None:
    assert [c.name for c in CHECKS] == [
        "environment",
        "visible-devices",
        "probe",
        "engines",
        "step-metric",
        "ddp",
        "zero-code",
    ]
    # Each is capped, and the whole run has its budget (BUDGET_S) on top.
    assert all(c.cap_s <= BUDGET_S for c in CHECKS)


def test_results_are_on_disk_after_each_entry(tmp_path: Path) -> None:
    log = ResultLog(tmp_path / "r", {"date": "now"}, lambda log: f"{len(log.entries)} entries")
    log.add({"check": "a", "status": "ok"})
    assert json.loads((tmp_path / "r.json").read_text())["results"] == [
        {"check": "a", "status": "ok"}
    ]
    assert (tmp_path / "r.md").read_text() == "1 entries\n"
    assert not list(tmp_path.glob("*.partial"))


def test_the_job_loop_logs_every_outcome_and_skips_once_the_budget_is_spent(
    tmp_path: Path,
) -> None:
    caps: list[float] = []

    def fine(cap: float) -> dict[str, object]:
        caps.append(cap)
        return {"status": "ok"}

    def broken(cap: float) -> dict[str, object]:
        raise ValueError("no such GPU")

    jobs = [
        Job("a", {"check": "a"}, 5.0, fine),
        Job("b", {"check": "b"}, 5.0, broken),
        Job("c", {"check": "c"}, 5.0, lambda cap: {"status": "skipped: fewer than 2 GPUs"}),
    ]
    log = ResultLog(tmp_path / "r", {}, lambda log: "")
    failed = run_jobs(
        jobs, log, deadline=time.monotonic() + 3600, min_cap_s=1, skipped="spent", tag="t"
    )
    assert failed and caps == [5.0]  # its own cap, well inside the budget
    entries = json.loads((tmp_path / "r.json").read_text())["results"]
    assert [(e["check"], e["status"]) for e in entries] == [
        ("a", "ok"),
        ("b", "error: ValueError: no such GPU"),
        ("c", "skipped: fewer than 2 GPUs"),
    ]
    spent = ResultLog(tmp_path / "s", {}, lambda log: "")
    assert run_jobs(
        jobs[:1], spent, deadline=time.monotonic(), min_cap_s=1, skipped="spent", tag="t"
    )
    assert spent.entries == [{"check": "a", "status": "spent"}]


def test_a_run_over_its_cap_is_stopped() -> None:
    done = run_capped([sys.executable, "-c", "import time; time.sleep(60)"], 1)
    assert done.timed_out and done.returncode is None


@pytest.mark.slow
def test_gpu_check_dry_run_passes_on_cpu(
    tmp_path: Path, trusted_isa: None, warm_compile_cache: Path
) -> None:
    """Every check passes; none is about a cold compile (the probe without a C compiler
    keeps its own empty cache), so the compiles go to the tests' warm cache."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("TRCOMP_", "MAKE"))}
    env["OMP_NUM_THREADS"] = "1"  # one intra-op thread per child: see conftest.ONE_THREAD
    if env.get(forkserver.DIR_ENV):  # its Python children forked (tests/helpers/forkserver.py)
        env.update(forkserver.environment(Path(env[forkserver.DIR_ENV])))
    args = f"--dry-run --steps 3 --compile-cache {warm_compile_cache}"
    proc = subprocess.run(
        ["make", "-s", "gpu-check", f"GPU_PY={sys.executable}",
         f"GPU_CHECK_OUT={tmp_path}", f"GPU_CHECK_ARGS={args}"],
        cwd=ROOT, env=env, capture_output=True, text=True, timeout=600,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-3000:]
    body = json.loads((tmp_path / "gpu-check.json").read_text())
    assert body["meta"]["dry_run"] is True
    assert body["meta"]["versions"]["torch"].startswith("2.9")
    assert {e["check"]: e["status"] for e in body["results"]} == dict.fromkeys(
        [c.name for c in CHECKS], "ok"
    )
    results = {e["check"]: e for e in body["results"]}
    assert results["probe"]["probe"]["ok"] is True
    assert results["probe"]["probe_without_c_compiler"]["ok"] is False
    assert results["engines"]["engines"]["inductor"]["max_loss_diff_vs_eager"] < 1e-4
    assert results["step-metric"]["hook_steps"] == results["step-metric"]["hook_steps_expected"]
    assert results["ddp"]["world_size"] == 2
    # FSDP2 on two gloo ranks: each block compiled inside FSDP's hooks trains as eager FSDP2.
    assert results["ddp"]["fsdp2_blocks_compiled"]["max_loss_diff_vs_fsdp2_eager"] < 1e-4
    assert "## ddp: ok" in (tmp_path / "gpu-check.md").read_text()
    zero_code = results["zero-code"]
    assert [m["module"] for m in zero_code["compiled_modules"]] == ["Sequential"]
    assert zero_code["graphs"] >= 1 and zero_code["kept"] in ("compiled", "eager")
    assert zero_code["speedup_vs_eager"] > 0


def _this_and_other_torch() -> tuple[str, str]:
    """This interpreter's torch as MAJOR.MINOR, and the other version trcomp runs."""
    import importlib.metadata

    here = ".".join(importlib.metadata.version("torch").split(".")[:2])
    return here, "2.9" if here == "2.14" else "2.14"


def test_run_on_torch_stays_on_this_interpreter_when_its_torch_is_the_one() -> None:
    from trcomp_bench.versions import run_on_torch

    here, _ = _this_and_other_torch()
    run_on_torch(None, "trcomp_bench.gpu_check", [])  # returns: nothing asked
    run_on_torch(here, "trcomp_bench.gpu_check", [])  # returns: no exec


def test_gpu_check_on_a_torch_without_an_interpreter_is_refused_with_the_command(
    tmp_path: Path,
) -> None:
    from trcomp.local.interpreter import env_var_for

    _, other = _this_and_other_torch()
    env = {k: v for k, v in os.environ.items() if not k.startswith(("TRCOMP_", "MAKE"))}
    proc = subprocess.run(
        ["make", "-s", "gpu-check", f"GPU_PY={sys.executable}", f"TORCH_VERSION={other}",
         f"GPU_CHECK_OUT={tmp_path}", "GPU_CHECK_ARGS=--dry-run --only environment"],
        cwd=ROOT, env=env, capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert proc.returncode != 0
    assert f"{env_var_for(other)} is not set" in proc.stderr, proc.stderr[-2000:]
    assert not (tmp_path / "gpu-check.json").exists()


@pytest.mark.slow
@pytest.mark.parametrize("tool", ["gpu_check", "gpu_h200"])
def test_dry_run_on_the_other_torch_records_the_torch_that_ran(tmp_path: Path, tool: str) -> None:
    """Needs the other version's environment (make install-214) named by its variable."""
    from trcomp.local.interpreter import env_var_for

    _, other = _this_and_other_torch()
    var = env_var_for(other)
    if not os.environ.get(var):
        pytest.skip(f"{var} is not set: no interpreter with torch {other}")
    env = {k: v for k, v in os.environ.items() if not k.startswith(("TRCOMP_", "MAKE"))}
    env[var] = os.environ[var]
    if tool == "gpu_check":
        command = [
            "make", "-s", "gpu-check", f"GPU_PY={sys.executable}", f"TORCH_VERSION={other}",
            f"GPU_CHECK_OUT={tmp_path}", "GPU_CHECK_ARGS=--dry-run --only environment",
        ]  # fmt: skip
        report = tmp_path / "gpu-check.json"
    else:
        env["PYTHONPATH"] = os.pathsep.join([str(ROOT / "sdk"), str(ROOT / "container")])
        command = [
            sys.executable, "-m", "trcomp_bench.gpu_h200", "--dry-run", "--torch-version", other,
            "--models", "gpt2-small", "--backends", "eager", "--steps", "2", "--warmup", "1",
            "--out", str(tmp_path / "h200"),
        ]  # fmt: skip
        report = tmp_path / "h200.json"
    proc = subprocess.run(command, cwd=ROOT, env=env, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    meta = json.loads(report.read_text())["meta"]
    assert meta["torch_version"] == other
    assert meta["versions"]["torch"].startswith(other + ".")
    assert meta["python"] == os.environ[var]
