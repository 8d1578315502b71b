"""Every way out of a job: one failure file, the right exit code, saved files kept.

These run the real ``train`` on a temporary tree; the scripts avoid torch, so
each job takes seconds.
"""

from __future__ import annotations

import signal
import subprocess
import sysconfig
import time
from pathlib import Path

import pytest

from tests.helpers import jobs
from trcomp.config import TrainingCompilerConfig
from trcomp_container.failures import torchrun_root_cause

pytestmark = pytest.mark.slow

OFF = TrainingCompilerConfig(enabled=False)


def assert_single_reason(failure: str | None) -> str:
    assert failure, "no failure file"
    assert "Framework Error" not in failure  # ours, not the toolkit's generic one
    return failure


def test_script_exception_gives_message_and_traceback_tail(tmp_path):
    run = jobs.run_job(
        tmp_path, config=OFF, entry_point="crash.py", hyperparameters={"mode": "raise"}
    )
    assert run.returncode == 1, run.output
    failure = assert_single_reason(run.failure)
    assert failure.startswith("ValueError: corrupt record 7 in shard train-00042")
    assert "load_batch" in failure and "Traceback" in failure
    assert (tmp_path / "model" / "partial.txt").exists()
    assert run.summary["exit_code"] == 1


def test_sigkill_is_137_probably_out_of_memory(tmp_path):
    run = jobs.run_job(
        tmp_path, config=OFF, entry_point="crash.py", hyperparameters={"mode": "kill"}
    )
    assert run.returncode == 137, run.output
    failure = assert_single_reason(run.failure)
    assert "signal 9" in failure and "out of memory" in failure
    assert (tmp_path / "model" / "partial.txt").exists()


def test_torchrun_worker_killed_by_sigkill_is_137(tmp_path):
    run = jobs.run_job(
        tmp_path,
        config=OFF,
        entry_point="kill_rank.py",
        hyperparameters={"sagemaker_torch_distributed_enabled": True},
        env={"TRCOMP_NPROC_PER_NODE": "2"},
    )
    assert run.returncode == 137, run.output
    failure = assert_single_reason(run.failure)
    assert "signal 9" in failure and "out of memory" in failure and "rank 1" in failure
    assert (tmp_path / "model" / "rank1.txt").exists()


def test_torchrun_root_cause_is_read_from_its_summary():
    tail = (
        "Root Cause (first observed failure):\n[0]:\n  time      : 2026-11-30_06:00:58\n"
        "  host      : localhost\n  rank      : 3 (local_rank: 1)\n"
        "  exitcode  : -9 (pid: 9208)\n  error_file: <N/A>\n"
    )
    assert torchrun_root_cause(tail) == (3, -9)
    assert torchrun_root_cause("Traceback ...\nValueError: x\n") is None


def test_plain_exit_code_passes_through_with_stderr_tail(tmp_path):
    run = jobs.run_job(
        tmp_path, config=OFF, entry_point="crash.py", hyperparameters={"mode": "exit"}
    )
    assert run.returncode == 3
    assert "giving up" in assert_single_reason(run.failure)


@pytest.mark.parametrize(
    ("body", "named"),
    [({"backend": "tpu"}, "backend"), ({"backend": "inductor", "warp_speed": True}, "warp_speed")],
)
def test_bad_config_names_the_field(tmp_path, body, named):
    hps = {"sagemaker_training_compiler_enabled": True, "sagemaker_training_compiler_config": body}
    run = jobs.run_job(tmp_path, config=None, entry_point="probe_env.py", hyperparameters=hps)
    assert run.returncode == 64, run.output
    failure = assert_single_reason(run.failure)
    assert failure.startswith("invalid compiler config") and named in failure
    assert not (tmp_path / "model" / "seen.json").exists()


@pytest.mark.parametrize(
    ("config", "name", "says"),
    [
        (OFF, "a=b", "holds '='"),
        (TrainingCompilerConfig(backend="inductor"), "lr=0.1", "holds '='"),
        (OFF, "nul\0name", "holds a NUL character"),
    ],
)
def test_a_hyperparameter_name_the_toolkit_cannot_pass_is_the_users_error(
    tmp_path, config, name, says
):
    """A job started without the SDK (which refuses the name at fit()): exit 70, "trcomp
    internal error" before, compiler on or off; now the config error, naming it."""
    run = jobs.run_job(
        tmp_path, config=config, entry_point="probe_env.py", hyperparameters={name: 1, "lr": 0.1}
    )
    assert run.returncode == 64, run.output
    failure = assert_single_reason(run.failure)
    assert failure.startswith(f"hyperparameter name {name!r} {says}") and "Rename" in failure
    assert "internal error" not in failure
    assert not (tmp_path / "model" / "seen.json").exists()  # the script never started
    assert run.summary["exit_code"] == 64


def test_missing_entry_point(tmp_path):
    run = jobs.run_job(
        tmp_path, config=OFF, entry_point=None, hyperparameters={"sagemaker_program": "nope.py"}
    )
    assert run.returncode == 66, run.output
    assert "'nope.py' not found" in assert_single_reason(run.failure)


def test_hyperparameters_are_argv_never_a_shell(tmp_path):
    evil = "; touch /tmp/trcomp-pwned #"
    run = jobs.run_job(
        tmp_path, config=OFF, entry_point="probe_env.py", hyperparameters={"name": evil, "lr": 0.1}
    )
    assert run.returncode == 0, run.output
    seen = run.model_json("seen.json")
    assert seen["argv"] == ["--lr", "0.1", "--name", evil]
    assert seen["env"]["USE_TORCH_XLA"] == "0" and seen["backend"] is None
    assert run.failure is None and (tmp_path / "output" / "success").exists()


def test_caches_follow_the_checkpoint_dir_the_estimator_names(tmp_path):
    custom = tmp_path / "my-checkpoints"
    run = jobs.run_job(
        tmp_path,
        config=TrainingCompilerConfig(backend="inductor"),
        entry_point="probe_env.py",
        env={"TRCOMP_CHECKPOINT_DIR": str(custom), "TRCOMP_CHECKPOINT_URI": "file:///me/ckpt/"},
    )
    assert run.returncode == 0, run.output
    live = Path(run.model_json("seen.json")["env"]["TORCHINDUCTOR_CACHE_DIR"])
    # The compilers write to a local dir; the cache persists under the checkpoint dir.
    assert live.name == "inductor" and not live.is_relative_to(custom)
    # Reported where the user keeps it, not at the job's own (deleted) path.
    assert run.summary["cache_dir"] == "file:///me/ckpt/trcomp-cache"


def test_legacy_two_key_job_compiles_with_inductor(tmp_path):
    hps = {
        "sagemaker_training_compiler_enabled": True,
        "sagemaker_training_compiler_debug_mode": False,
    }
    run = jobs.run_job(tmp_path, config=None, entry_point="probe_env.py", hyperparameters=hps)
    assert run.returncode == 0, run.output
    seen = run.model_json("seen.json")
    assert seen["backend"] == "inductor"
    assert seen["env"]["ACCELERATE_DYNAMO_BACKEND"] == "INDUCTOR"
    assert seen["env"]["TORCHINDUCTOR_CACHE_DIR"].endswith("/compile-cache/inductor")
    assert run.summary["cache_dir"] == str(tmp_path / "checkpoints/trcomp-cache")


@pytest.fixture
def broken_torch_xla(tmp_path):
    shadow = tmp_path / "shadow"
    (shadow / "torch_xla").mkdir(parents=True)
    (shadow / "torch_xla" / "__init__.py").write_text(
        "raise ImportError('libtpu.so: cannot open shared object file (simulated)')\n"
    )
    return {"PYTHONPATH": str(shadow)}


def test_backend_that_cannot_start_falls_back_to_eager_loudly(tmp_path, broken_torch_xla):
    config = TrainingCompilerConfig(backend="xla", fallback="eager")
    base = tmp_path / "job"
    jobs.lay_out(base, config=config, entry_point="probe_env.py")
    env = jobs.job_env(base, broken_torch_xla)
    env["PYTHONPATH"] = env["PYTHONPATH"] + ":" + broken_torch_xla["PYTHONPATH"]
    done = subprocess.run(
        jobs.train_command(), env=env, capture_output=True, text=True, timeout=300
    )
    assert done.returncode == 0, done.stdout + done.stderr
    assert "running EAGER" in done.stderr
    summary = jobs.JobRun(base, 0, "", 0).summary
    assert summary["backend"] is None and "simulated" in summary["warnings"][0]
    seen = jobs.JobRun(base, 0, "", 0).model_json("seen.json")
    assert seen["backend"] is None and seen["env"]["USE_TORCH_XLA"] == "0"


def test_backend_that_cannot_start_fails_with_fallback_fail(tmp_path, broken_torch_xla):
    config = TrainingCompilerConfig(backend="xla", fallback="fail")
    base = tmp_path / "job"
    jobs.lay_out(base, config=config, entry_point="probe_env.py")
    env = jobs.job_env(base)
    env["PYTHONPATH"] = env["PYTHONPATH"] + ":" + broken_torch_xla["PYTHONPATH"]
    done = subprocess.run(
        jobs.train_command(), env=env, capture_output=True, text=True, timeout=300
    )
    assert done.returncode == 69, done.stdout + done.stderr
    failure = assert_single_reason((base / "output" / "failure").read_text())
    assert "xla compiler cannot start" in failure and "simulated" in failure
    assert not (base / "model" / "seen.json").exists()


@pytest.fixture
def without_python_headers() -> list[str]:
    """A command prefix that runs the job where this Python's headers are not installed.

    A private mount namespace with an empty tmpfs over the include dir: inductor
    cannot compile there (torch warns "Can't find Python.h" and the compile fails),
    as on a host with g++ but no python3-dev. Needs root (CI runs as root).
    """
    include = sysconfig.get_path("include")
    hide = f'mount -t tmpfs trcomp-no-headers "{include}" && exec "$@"'
    prefix = ["unshare", "--mount", "sh", "-c", hide, "sh"]
    probe = subprocess.run([*prefix, "test", "!", "-e", f"{include}/Python.h"], check=False)
    if probe.returncode != 0:
        pytest.skip("cannot hide the Python headers: needs root and unshare(1)")
    return prefix


@pytest.mark.parametrize("fallback", ["eager", "fail"])
def test_missing_python_headers_stop_cpu_inductor_before_the_script(
    tmp_path, without_python_headers, fallback
):
    config = TrainingCompilerConfig(backend="inductor", fallback=fallback)
    base = tmp_path / "job"
    jobs.lay_out(base, config=config, entry_point="probe_env.py")
    done = subprocess.run(
        [*without_python_headers, *jobs.train_command()],
        env=jobs.job_env(base),
        capture_output=True,
        text=True,
        timeout=300,
    )
    run = jobs.JobRun(base, done.returncode, done.stdout + done.stderr, 0)
    reason = "Python.h"
    fix = f"python{sysconfig.get_python_version()}-dev"
    if fallback == "fail":
        assert run.returncode == 69, run.output
        failure = assert_single_reason(run.failure)
        assert "inductor compiler cannot start" in failure
        assert reason in failure and fix in failure
        assert not (base / "model" / "seen.json").exists()
    else:
        assert run.returncode == 0, run.output
        assert run.summary["backend"] is None
        (warning,) = run.summary["warnings"]
        assert reason in warning and fix in warning and "running EAGER" in warning
        assert run.model_json("seen.json")["backend"] is None


def test_sigterm_is_forwarded_and_the_checkpoint_survives(tmp_path):
    jobs.lay_out(tmp_path, config=OFF, entry_point="sigterm.py")
    proc = subprocess.Popen(
        jobs.train_command(),
        env=jobs.job_env(tmp_path),
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    deadline = time.monotonic() + 120
    while not (tmp_path / "model" / "started").exists():
        assert proc.poll() is None and time.monotonic() < deadline, "script never started"
        time.sleep(0.1)
    proc.send_signal(signal.SIGTERM)
    output, _ = proc.communicate(timeout=60)
    assert proc.returncode == 143, output
    failure = assert_single_reason((tmp_path / "output" / "failure").read_text())
    assert "stopped by signal 15" in failure and "exited with code 0" in failure
    assert (tmp_path / "checkpoints" / "on-sigterm.pt").exists()
    assert (tmp_path / "checkpoints" / "step-1.pt").exists()
    assert (tmp_path / "model" / "started").exists()


def test_unknown_inductor_option_fails_the_job_naming_it(tmp_path):
    config = TrainingCompilerConfig(
        backend="inductor", inductor_options={"no_such_option": 1, "max_autotune": True}
    )
    run = jobs.run_job(tmp_path, config=config, entry_point="probe_env.py")
    assert run.returncode == 64, run.output
    failure = assert_single_reason(run.failure)
    assert "'no_such_option' is not an option" in failure and "max_autotune" not in failure
    assert not (tmp_path / "model" / "seen.json").exists()  # refused before the script ran


def test_inductor_option_the_mode_overrides_fails_the_job_naming_both(tmp_path):
    config = TrainingCompilerConfig(
        backend="inductor", mode="reduce-overhead", inductor_options={"triton.cudagraphs": False}
    )
    run = jobs.run_job(tmp_path, config=config, entry_point="probe_env.py")
    assert run.returncode == 64, run.output
    failure = assert_single_reason(run.failure)
    assert "triton.cudagraphs=False but mode='reduce-overhead' sets triton.cudagraphs=True" in (
        failure
    )
    assert not (tmp_path / "model" / "seen.json").exists()  # refused before the script ran


def test_summary_keeps_the_backend_and_the_users_cache_location(tmp_path):
    # The entry point cannot be prepared: the compiler was still on, and said so.
    run = jobs.run_job(
        tmp_path,
        config=TrainingCompilerConfig(backend="inductor"),
        entry_point=None,
        hyperparameters={"sagemaker_program": "nope.py"},
        env={"TRCOMP_CHECKPOINT_URI": "file:///home/me/ckpt/"},
    )
    assert run.returncode == 66, run.output
    assert run.summary["backend"] == "inductor"
    assert "compiler off" not in run.output
