"""Stopping a process-mode job: Ctrl-C once and twice, SIGTERM and SIGKILL of ``fit()``.

Real processes: a driver calls ``fit()`` on a script that ignores SIGTERM (or
saves a checkpoint on it); the test signals the driver as a terminal, a CI
timeout or the OOM killer would, and then looks for any process of the job:
the script by a unique marker in its command line, ``train`` and the rest by
the job name in their environment.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import tarfile
import textwrap
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

pytestmark = pytest.mark.slow

GRACE_S = 2
# The runner kills the script GRACE_S after SIGTERM; fit() waits 10 s more
# (trcomp.contract.proctree.GRACE_MARGIN_S) before it kills the whole tree itself.
WITHIN_S = GRACE_S + 10 + 5

SCRIPT = """
import argparse, os, pathlib, signal, time
parser = argparse.ArgumentParser()
parser.add_argument("--marker")
parser.add_argument("--on-sigterm", default="ignore")
parser.add_argument("--ready")
args = parser.parse_args()

def save(signum, frame):
    pathlib.Path(os.environ["SM_MODEL_DIR"], "checkpoint.txt").write_text("saved on SIGTERM")
    raise SystemExit(0)

signal.signal(signal.SIGTERM, signal.SIG_IGN if args.on_sigterm == "ignore" else save)
pathlib.Path(args.ready).write_text("ready")
while True:
    time.sleep(0.1)
"""

DRIVER = textwrap.dedent("""
    import json, os, signal, sys, trcomp
    signal.signal(signal.SIGINT, signal.default_int_handler)  # as in a terminal
    # Not argv: only the script's command line may hold the marker.
    source, out, name, marker, on_sigterm, grace, ready = json.loads(os.environ.pop("STOP_TEST"))
    est = trcomp.PyTorch(
        entry_point="stubborn.py", source_dir=source, role="arn:aws:iam::1:role/R",
        instance_type="local_process", instance_count=1, output_path="file://" + out,
        compiler_config=trcomp.TrainingCompilerConfig(enabled=False),
        hyperparameters={"marker": marker, "on-sigterm": on_sigterm, "ready": ready},
        environment={"TRCOMP_SIGTERM_GRACE_S": grace},
    )
    try:
        est.fit(job_name=name)
    except trcomp.JobInterrupted as exc:
        print(f"INTERRUPTED exit_code={exc.exit_code}: {exc}", flush=True)
        sys.exit(130)
""")


def _job_processes(marker: str, job_name: str) -> list[int]:
    """Processes with the marker in their command line or the job name in their environment."""
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit() or int(entry.name) == os.getpid():
            continue
        try:
            cmdline = (entry / "cmdline").read_bytes()
            environ = (entry / "environ").read_bytes()
        except OSError:
            continue
        if marker.encode() in cmdline or f"TRAINING_JOB_NAME={job_name}".encode() in environ:
            found.append(int(entry.name))
    return found


def _wait_for(condition, timeout: float) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if condition():
            return True
        time.sleep(0.2)
    return bool(condition())


class _Job:
    def __init__(self, tmp_path: Path, on_sigterm: str, grace: int) -> None:
        (tmp_path / "src").mkdir()
        (tmp_path / "src" / "stubborn.py").write_text(SCRIPT)
        self.out = tmp_path / "out"
        self.marker = f"marker-{uuid.uuid4().hex}"
        self.name = f"stop-test-{uuid.uuid4().hex[:12]}"
        self.ready = tmp_path / "ready"
        args = [str(tmp_path / "src"), str(self.out), self.name, self.marker, on_sigterm]
        self.driver = subprocess.Popen(
            [sys.executable, "-c", DRIVER],
            env={**os.environ, "STOP_TEST": json.dumps([*args, str(grace), str(self.ready)])},
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
        )

    def script_ready(self) -> bool:
        """The script runs and has set its SIGTERM handler."""
        return self.ready.is_file()

    def gone(self) -> bool:
        return not _job_processes(self.marker, self.name)


@pytest.fixture
def job_factory(tmp_path: Path) -> Iterator[type]:
    jobs: list[_Job] = []

    def start(on_sigterm: str = "ignore", grace: int = GRACE_S) -> _Job:
        job = _Job(tmp_path, on_sigterm, grace)
        jobs.append(job)
        assert _wait_for(job.script_ready, 90), job.driver.communicate(timeout=5)[0][-3000:]
        return job

    yield start  # type: ignore[misc]
    for job in jobs:  # never leave a stubborn script behind, whatever the test found
        job.driver.kill()
        for pid in _job_processes(job.marker, job.name):
            with contextlib.suppress(OSError):
                os.kill(pid, signal.SIGKILL)


def test_ctrl_c_stops_a_script_that_ignores_sigterm(job_factory) -> None:
    job = job_factory()
    job.driver.send_signal(signal.SIGINT)
    out, _ = job.driver.communicate(timeout=WITHIN_S + 30)
    assert _wait_for(job.gone, WITHIN_S), out[-3000:]
    assert job.driver.returncode == 130, out[-3000:]
    assert "INTERRUPTED exit_code=143" in out
    assert f"{job.out / job.name / 'output'}" in out  # the message says where things are


def test_second_ctrl_c_kills_at_once(job_factory) -> None:
    job = job_factory(grace=600)
    job.driver.send_signal(signal.SIGINT)
    time.sleep(1.0)
    job.driver.send_signal(signal.SIGINT)
    # Far within the 600 s grace period: the second Ctrl-C does not wait.
    assert _wait_for(job.gone, 15)
    out, _ = job.driver.communicate(timeout=30)
    assert "killing job" in out, out[-3000:]
    assert job.driver.returncode == 130, out[-3000:]


def test_sigterm_to_fit_stops_the_job_and_packs_its_checkpoint(job_factory) -> None:
    job = job_factory(on_sigterm="save")
    job.driver.send_signal(signal.SIGTERM)
    out, _ = job.driver.communicate(timeout=WITHIN_S + 30)
    assert _wait_for(job.gone, WITHIN_S)
    assert job.driver.returncode == 143, out[-3000:]
    model = job.out / job.name / "output" / "model.tar.gz"
    with tarfile.open(model) as tar:
        saved = tar.extractfile("checkpoint.txt")
        assert saved is not None and saved.read() == b"saved on SIGTERM"


def test_sigkill_of_fit_takes_the_job_down(job_factory) -> None:
    job = job_factory()
    job.driver.kill()
    job.driver.wait(timeout=10)
    # Nobody is left to pack or report; the job must still not outlive fit().
    assert _wait_for(job.gone, WITHIN_S), _job_processes(job.marker, job.name)
