"""The test jobs' fork server (tests/helpers/forkserver.py): a script the shim starts runs
forked from a zygote exactly as it would as its own process (arguments, environment,
working directory, standard streams, exit, signals), or runs as its own process."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.helpers import forkserver

pytestmark = pytest.mark.slow

REPORT = """
import json, os, sys
import torch
import torch.compiler.config as compiler_config
print(json.dumps({
    "argv": sys.argv[1:],
    "cwd": os.getcwd(),
    "mine": os.environ.get("MINE"),
    "shim_vars": sorted(set(os.environ) & {"PYTHONEXECUTABLE", "FORKSERVER_DIR_FOR_TESTS",
                                            "FORKSERVER_PYTHON_FOR_TESTS"}),
    "job_id": compiler_config.job_id,
    "preloaded": "torch._inductor.compile_fx" in sys.modules,
}))
print("to stderr", file=sys.stderr)
sys.exit(3)
"""

WAITS = """
import os, signal, sys, time
from pathlib import Path
signal.signal(signal.SIGTERM, lambda *_: sys.exit(7))
Path(sys.argv[1]).write_text(str(os.getpid()))
print("ready", flush=True)
time.sleep(300)
"""


@pytest.fixture(scope="module")
def served(
    tmp_path_factory: pytest.TempPathFactory,
) -> Iterator[tuple[Path, dict[str, str], tuple[dict, str, int]]]:
    """A fork-server directory, a job-like environment for the shim, the report of a run
    that started the zygote (itself not forked), and that zygote up."""
    directory = Path(tempfile.mkdtemp(prefix="trcomp-fs-test-"))
    base = {k: v for k, v in os.environ.items() if not k.startswith(("TRCOMP_", "PYTHON"))}
    env = {**base, **forkserver.environment(directory), "TORCH_COMPILE_JOB_ID": "job-a"}
    code = tmp_path_factory.mktemp("code")
    (code / "report.py").write_text(REPORT)
    (code / "waits.py").write_text(WAITS)
    alone = report(code, env, MINE="x")
    deadline = time.monotonic() + 180
    while not list(directory.glob("*.sock")):
        assert time.monotonic() < deadline, "no zygote came up"
        time.sleep(0.2)
    yield code, env, alone
    shutil.rmtree(directory, ignore_errors=True)  # its zygotes end within seconds


def shim(env: dict[str, str], script: Path, *args: str) -> list[str]:
    return [env["PYTHONEXECUTABLE"], str(script), *args]


def report(code: Path, env: dict[str, str], **more: str) -> tuple[dict, str, int]:
    done = subprocess.run(
        shim(env, code / "report.py", "--steps", "2"),
        env={**env, **more},
        cwd=code,
        capture_output=True,
        text=True,
        timeout=180,
    )
    assert done.stdout, done.stderr
    return json.loads(done.stdout.splitlines()[-1]), done.stderr, done.returncode


def start_waiting(code: Path, env: dict[str, str], pid_file: Path) -> tuple[subprocess.Popen, int]:
    """``waits.py`` through the shim, once it is ready: the shim and the script's pid."""
    waits = subprocess.Popen(
        shim(env, code / "waits.py", str(pid_file)),
        env=env,
        cwd=code,
        stdout=subprocess.PIPE,
        text=True,
    )
    assert waits.stdout is not None and waits.stdout.readline().strip() == "ready"
    return waits, int(pid_file.read_text())


def test_a_script_runs_forked_as_it_runs_alone(served) -> None:
    code, env, (alone, alone_err, alone_code) = served
    forked, forked_err, forked_code = report(code, env, MINE="x", TORCH_COMPILE_JOB_ID="job-b")
    assert alone["preloaded"] is False and forked["preloaded"] is True
    assert alone_code == forked_code == 3
    assert alone_err.strip() == forked_err.strip() == "to stderr"
    for seen in (alone, forked):
        assert seen["argv"] == ["--steps", "2"] and seen["cwd"] == str(code)
        assert seen["mine"] == "x" and seen["shim_vars"] == []
    # torch read job_id when the zygote imported it (job-a); the fork has its own.
    assert (alone["job_id"], forked["job_id"]) == ("job-a", "job-b")


def test_a_script_with_other_import_time_variables_runs_alone(served) -> None:
    code, env, _ = served
    seen, _, returncode = report(code, env, TORCH_LOGS="-all")
    assert returncode == 3 and seen["preloaded"] is False


def test_signals_reach_the_forked_script_and_the_shim_ends_as_it_did(
    served, tmp_path: Path
) -> None:
    code, env, _ = served
    waits, script = start_waiting(code, env, tmp_path / "pid")
    assert script != waits.pid  # forked, not the shim's own process
    waits.send_signal(signal.SIGTERM)
    assert waits.wait(timeout=60) == 7
    (code / "suicide.py").write_text("import os, signal\nos.kill(os.getpid(), signal.SIGKILL)\n")
    done = subprocess.run(shim(env, code / "suicide.py"), env=env, cwd=code, timeout=180)
    assert done.returncode == -signal.SIGKILL


def test_a_killed_shim_takes_its_forked_script_with_it(served, tmp_path: Path) -> None:
    code, env, _ = served
    waits, script = start_waiting(code, env, tmp_path / "pid")
    waits.kill()
    waits.wait(timeout=30)
    deadline = time.monotonic() + 30
    while Path(f"/proc/{script}").exists():
        assert time.monotonic() < deadline, "the forked script outlived its shim"
        time.sleep(0.1)
