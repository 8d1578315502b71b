"""The test jobs' fork server (tests/helpers/forkserver.py): a script, module or ``-c``
code the shim starts runs forked from a zygote exactly as it would as its own process
(arguments, ``sys.path``, environment, working directory, standard streams, exit,
signals), or runs as its own process."""

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
    "argv0": sys.argv[0],
    "path0": sys.path[0],
    "main": [__name__, globals().get("__file__")],
    "cwd": os.getcwd(),
    "mine": os.environ.get("MINE"),
    "logs": os.environ.get("TORCH_LOGS"),
    "shim_vars": sorted(set(os.environ) & {"PYTHONEXECUTABLE", "FORKSERVER_DIR_FOR_TESTS",
                                            "FORKSERVER_PYTHON_FOR_TESTS"}),
    "job_id": compiler_config.job_id,
    "preloaded": "torch._inductor.compile_fx" in sys.modules,
    "sitecustomize": os.environ.get("SITE_RAN"),
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
    """A fork-server directory, a job-like environment for the shim, and the report of a
    first run, which started the zygote and waited for it."""
    directory = Path(tempfile.mkdtemp(prefix="trcomp-fs-test-"))
    base = {k: v for k, v in os.environ.items() if not k.startswith(("TRCOMP_", "PYTHON"))}
    env = {**base, **forkserver.environment(directory), "TORCH_COMPILE_JOB_ID": "job-a"}
    code = tmp_path_factory.mktemp("code")
    (code / "report.py").write_text(REPORT)
    (code / "waits.py").write_text(WAITS)
    first = report(code, env, MINE="x")
    yield code, env, first
    shutil.rmtree(directory, ignore_errors=True)  # its zygotes end within seconds


def shim(env: dict[str, str], script: Path, *args: str) -> list[str]:
    return [env["PYTHONEXECUTABLE"], str(script), *args]


def run(command: list[str], code: Path, env: dict[str, str], **more: str) -> tuple[dict, str, int]:
    done = subprocess.run(
        command, env={**env, **more}, cwd=code, capture_output=True, text=True, timeout=180
    )
    assert done.stdout, done.stderr
    return json.loads(done.stdout.splitlines()[-1]), done.stderr, done.returncode


def report(code: Path, env: dict[str, str], **more: str) -> tuple[dict, str, int]:
    return run(shim(env, code / "report.py", "--steps", "2"), code, env, **more)


def alone(argv: list[str], code: Path, env: dict[str, str], **more: str) -> tuple[dict, str, int]:
    """``argv`` in the real interpreter, as its own process (what the shim stands for)."""
    plain = {k: v for k, v in env.items() if k not in forkserver.SHIM_ENV}
    return run([env[forkserver.PYTHON_ENV], *argv], code, plain, **more)


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


def test_run_python_forks_what_the_shim_forks_and_starts_the_rest(
    served, monkeypatch: pytest.MonkeyPatch
) -> None:
    _, env, _ = served
    plain = {k: v for k, v in env.items() if k not in forkserver.SHIM_ENV}
    preloaded = "import sys; print('torch._inductor.compile_fx' in sys.modules)"

    def run(args: list[str]) -> str:
        done = forkserver.run_python(args, plain, capture_output=True, text=True, timeout=180)
        assert done.returncode == 0, done.stderr
        return done.stdout.strip()

    monkeypatch.setenv(forkserver.DIR_ENV, env[forkserver.DIR_ENV])
    assert run(["-c", preloaded]) == "True"  # the served zygote's child
    assert run(["-I", "-c", preloaded]) == "False"  # an interpreter option: its own process
    monkeypatch.delenv(forkserver.DIR_ENV)
    assert run(["-c", preloaded]) == "False"  # a session without the fork server


def test_a_script_runs_forked_as_it_runs_alone(served) -> None:
    code, env, (first, first_err, first_code) = served
    forked, forked_err, forked_code = report(code, env, MINE="x", TORCH_COMPILE_JOB_ID="job-b")
    own, own_err, own_code = alone([str(code / "report.py"), "--steps", "2"], code, env, MINE="x")
    assert first["preloaded"] and forked["preloaded"] and not own["preloaded"]
    assert first_code == forked_code == own_code == 3
    assert first_err.strip() == forked_err.strip() == own_err.strip() == "to stderr"
    for seen in (first, forked):
        assert {k: v for k, v in seen.items() if k not in ("preloaded", "job_id")} == {
            k: v for k, v in own.items() if k not in ("preloaded", "job_id")
        }
    assert own["argv"] == ["--steps", "2"] and own["cwd"] == str(code) and own["mine"] == "x"
    assert own["shim_vars"] == [] and own["main"] == ["__main__", str(code / "report.py")]
    # torch read job_id when the zygote imported it (job-a); each fork has its own.
    assert (first["job_id"], forked["job_id"], own["job_id"]) == ("job-a", "job-b", "job-a")


def test_a_module_and_c_code_run_forked_as_they_run_alone(served) -> None:
    code, env, _ = served
    shim_python = env["PYTHONEXECUTABLE"]
    # A sitecustomize on PYTHONPATH, not in its first entry (the benchmark's workers).
    (code / "site").mkdir(exist_ok=True)
    (code / "site" / "sitecustomize.py").write_text("import os\nos.environ['SITE_RAN'] = '1'\n")
    paths = {"PYTHONPATH": f"{code / 'nothing'}{os.pathsep}{code / 'site'}"}
    for argv in (["-m", "report", "--steps", "2"], ["-c", REPORT, "--steps", "2"]):
        forked, forked_err, forked_code = run([shim_python, *argv], code, env, **paths)
        own, own_err, own_code = alone(argv, code, env, **paths)
        assert forked.pop("preloaded") and not own.pop("preloaded")
        assert (forked, forked_err, forked_code) == (own, own_err, own_code)
    assert own["argv0"] == "-c" and own["path0"] == "" and own["main"] == ["__main__", None]
    assert own["sitecustomize"] == "1"


def test_other_import_time_variables_get_their_own_zygote_and_xla_ones_do_not(served) -> None:
    code, env, _ = served
    seen, _, returncode = report(code, env, TORCH_LOGS="-all")
    assert returncode == 3 and seen["preloaded"] and seen["logs"] == "-all"
    directory = Path(env[forkserver.DIR_ENV])
    assert len(list(directory.glob("*.sock"))) == 2
    # What only torch-xla, JAX or transformers read (imported in the fork) may differ.
    seen, _, returncode = report(code, env, XLA_FLAGS="--xla_dump_to=x", PJRT_DEVICE="CPU")
    assert returncode == 3 and seen["preloaded"]
    assert len(list(directory.glob("*.sock"))) == 2


def test_a_zygote_that_cannot_start_leaves_the_script_to_run_alone(tmp_path: Path) -> None:
    directory = Path(tempfile.mkdtemp(prefix="trcomp-fs-test-"))
    broken = tmp_path / "broken"
    (broken / "torch").mkdir(parents=True)
    (broken / "torch" / "__init__.py").write_text("raise ImportError('no torch here')\n")
    (tmp_path / "hello.py").write_text("print('hello')\n")
    base = {k: v for k, v in os.environ.items() if not k.startswith(("TRCOMP_", "PYTHON"))}
    env = {**base, **forkserver.environment(directory), "PYTHONPATH": str(broken)}
    try:
        done = subprocess.run(
            shim(env, tmp_path / "hello.py"), env=env, capture_output=True, text=True, timeout=150
        )
        assert (done.returncode, done.stdout) == (0, "hello\n"), done.stderr
        assert forkserver.counts(directory) == (1, 0, 1)
        assert "no torch here" in next(directory.glob("*.log")).read_text()
    finally:
        shutil.rmtree(directory, ignore_errors=True)


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


RANKED = """
import json, os, sys
streams = [sys.stdout, sys.stderr]
print(json.dumps({
    "rank": os.environ.get("RANK"),
    "preloaded": "torch._inductor.compile_fx" in sys.modules,
    "streams": [[type(s.buffer).__name__, s.write_through, s.line_buffering] for s in streams],
    "dunder": sys.stdout is sys.__stdout__ and sys.stderr is sys.__stderr__,
    "shim_vars": sorted(set(os.environ) & {"PYTHONEXECUTABLE", "FORKSERVER_DIR_FOR_TESTS",
                                            "FORKSERVER_PYTHON_FOR_TESTS"}),
}))
"""


def test_torchruns_workers_run_forked_with_unbuffered_streams_as_python_u(served) -> None:
    """torchrun (``-m torch.distributed.run``) runs for real with the shim as its
    ``sys.executable``; its workers (``python -u script``) are forked, their stdout and
    stderr unbuffered as ``-u`` makes them, whatever the zygote's were."""
    code, env, _ = served
    (code / "ranked.py").write_text(RANKED)
    env = {k: v for k, v in env.items() if k != "PYTHONUNBUFFERED"}
    launcher = ["-m", "torch.distributed.run", "--standalone", "--nproc_per_node", "2"]
    done = subprocess.run(
        [env["PYTHONEXECUTABLE"], *launcher, "ranked.py"],
        env=env, cwd=code, capture_output=True, text=True, timeout=180,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-2000:]
    ranks = [json.loads(line) for line in done.stdout.splitlines() if line.startswith("{")]
    assert sorted(r.pop("rank") for r in ranks) == ["0", "1"]
    own, _, _ = alone(["-u", "ranked.py"], code, env)
    assert own.pop("rank") is None and own.pop("preloaded") is False
    for forked in ranks:
        assert forked.pop("preloaded") is True
        assert forked == own
    assert own["streams"] == [["FileIO", True, False]] * 2 and own["shim_vars"] == []
