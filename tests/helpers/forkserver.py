"""Start the test jobs' training scripts as forks of a process that has imported torch.

Every process-mode job of the tests (tests/helpers/jobs.py) imports torch, dynamo and
inductor again in its training script: most of a small job's time on a 2-core
machine. With the tests' job environment, the entrypoint's ``sys.executable`` is
tests/helpers/shim/python (``PYTHONEXECUTABLE``, a link to it in the interpreter's
directory: :func:`installed_shim`), so what it launches in Python (the training
script, its ``-m trcomp_container.probe`` and ``-c`` checks) is ``shim argv...``. The
shim asks the zygote for the run's import-time environment (:func:`signature`: the
variables read while torch's compiler stack is imported, tests/helpers/zygote.py)
over a Unix socket in ``$FORKSERVER_DIR_FOR_TESTS``, passing its own stdin, stdout and
stderr. The zygote forks; the child takes those descriptors, the environment (less
the two variables above), the working directory and the arguments, starts trcomp's
hook as ``sitecustomize`` would and runs the script, module or code as ``__main__``.
The shim relays the signals it gets to the child and exits as the child did (killed
by the same signal, or with the same code); if the shim dies, the zygote kills the
child.

A signature's first run starts its zygote and waits for it (it would import the same
modules itself). Anything else runs in the real interpreter, as it would without the
shim: an interpreter option other than ``-u`` (torchrun's workers, forked with their
streams unbuffered), ``-m torch.distributed.run`` (with the shim as its
``sys.executable``, so that its workers come back to it), a session that has
:data:`MAX_ZYGOTES` already, a zygote that failed to start. A
zygote exits when the session's directory is gone or after :data:`IDLE_S` idle
seconds.
``TRCOMP_TEST_FORKSERVER=off``: no shim, every script a new process.
"""

from __future__ import annotations

import contextlib
import functools
import hashlib
import json
import os
import selectors
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from tests.helpers import zygote

SHIM = Path(__file__).resolve().parent / "shim" / "python"
DIR_ENV = "FORKSERVER_DIR_FOR_TESTS"
PYTHON_ENV = "FORKSERVER_PYTHON_FOR_TESTS"  # the interpreter the shim stands for
SHIM_ENV = ("PYTHONEXECUTABLE", DIR_ENV, PYTHON_ENV)  # the script never sees these
IDLE_S = 600
# Besides the corpus zygote's (zygote.PER_RUN): read when used (each job has its own cache),
# or refreshed in the child (:func:`_refresh_job_id`; each job's PGO key is its own).
JOB_ID_ENV = ("TORCH_COMPILE_JOB_ID", "TORCH_COMPILE_STICKY_PGO_KEY")
PER_RUN = zygote.PER_RUN | {"TORCHINDUCTOR_CACHE_DIR", *JOB_ID_ENV}
# Read only by what the zygote does not import (torch-xla, JAX, transformers), which a
# run imports in its fork, with its own environment: each XLA job has its own
# XLA_PERSISTENT_CACHE_PATH, and would otherwise need a zygote of its own.
READ_LATER = ("XLA", "PJRT", "USE_TORCH_XLA", "JAX", "HF_", "TRANSFORMERS")
# What torchrun gives each worker beside its rank (torch.distributed.elastic's agent): read
# when used (the error file, the run id), so the workers of every torchrun share a zygote.
PER_WORKER = ("TORCHELASTIC_", "TORCH_NCCL_ASYNC_ERROR_HANDLING")
MAX_ZYGOTES = 11  # each holds torch's compiler stack in memory (0.7-0.8 GB seen)
START_WAIT_S = 120  # the longest a run waits for its zygote to import
NOT_FORKED_MODULES = frozenset({"torch.distributed.run"})


def environment(directory: Path) -> dict[str, str]:
    """What a job's environment adds for the shim (tests/helpers/jobs.py job_env)."""
    return {
        "PYTHONEXECUTABLE": str(installed_shim()),
        DIR_ENV: str(directory),
        PYTHON_ENV: sys.executable,
    }


def run_python(
    args: list[str], env: Mapping[str, str], **kwargs: Any
) -> subprocess.CompletedProcess[str]:
    """``subprocess.run([python, *args], env=env, **kwargs)``, forked from the session's
    zygote for ``env``'s import-time variables where the session has a fork server and the
    shim would fork it (:func:`forkable`), as the tests' jobs are.

    For a child whose test checks what it does once Python has started (the hook's
    callbacks, a compile, what a script prints), not how the interpreter starts: a
    ``-I``/``-S`` run, a ``sitecustomize`` of the image's own or an import order the test
    is about needs a new interpreter (``subprocess.run`` itself). A fork saves the
    child's import of torch's compiler stack (2-3 CPU-seconds here), once a signature's
    zygote is up.
    """
    directory = os.environ.get(DIR_ENV)
    if not directory or not forkable(args):
        return subprocess.run([sys.executable, *args], env=env, **kwargs)
    shim_env = {**env, **environment(Path(directory))}
    return subprocess.run([str(installed_shim()), *args], env=shim_env, **kwargs)


def installed_shim() -> Path:
    """The shim as a link next to this interpreter: Python finds its virtual environment
    (``pyvenv.cfg``) from the directory of ``sys.executable``, here the shim's."""
    link = Path(sys.executable).parent / "python-forkserver-shim"
    if not (link.is_symlink() and link.resolve() == SHIM):
        staging = link.with_name(f"{link.name}.{os.getpid()}")
        staging.unlink(missing_ok=True)
        staging.symlink_to(SHIM)
        staging.replace(link)
    return link


def signature(python: str, env: Mapping[str, str]) -> str:
    """Which zygote can fork a script run by ``python`` with ``env``: a hash of the
    interpreter and of the variables read while the zygote imports."""
    body = json.dumps([python, sorted(_read_at_import(env).items())])
    return hashlib.sha256(body.encode()).hexdigest()[:16]


def _read_at_import(env: Mapping[str, str], per_run: frozenset[str] = PER_RUN) -> dict[str, str]:
    return {
        name: value
        for name, value in env.items()
        if name.startswith(zygote.IMPORT_TIME)
        and not name.startswith(READ_LATER)
        and not name.startswith(PER_WORKER)
        and name not in per_run
        and name not in SHIM_ENV
    }


# -- the zygote side ---------------------------------------------------------------------


def serve(path: Path) -> int:
    """Import torch's compiler stack, then fork a child for each request on ``path``."""
    # Importing can wait on a lock in the session's directory: if the session ends (the
    # directory goes) meanwhile, end rather than wait out torch's lock timeout.
    starting = threading.Event()
    watch = threading.Thread(target=_end_if_gone, args=(path.parent, starting), daemon=True)
    watch.start()
    base_path, wake_r, wake_w = zygote.prepare()
    starting.set()
    watch.join()  # no thread left when the zygote forks
    # Where torch's job_id entry cannot be refreshed, a run must have the zygote's job id.
    per_run = PER_RUN if _job_id_refreshable() else PER_RUN - set(JOB_ID_ENV)
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    staging = path.with_suffix(".new")
    staging.unlink(missing_ok=True)
    listener.bind(str(staging))
    listener.listen(16)
    staging.rename(path)  # the shims connect only once the zygote is ready
    running: dict[int, socket.socket] = {}  # child pid -> its shim's connection
    idle_since = time.monotonic()
    with selectors.DefaultSelector() as selector:
        selector.register(listener, selectors.EVENT_READ)
        selector.register(wake_r, selectors.EVENT_READ)
        while True:
            for key, _ in selector.select(timeout=2):
                if key.fileobj == wake_r:
                    os.read(wake_r, 4096)
                elif key.fileobj is listener:
                    conn, _ = listener.accept()
                    held = [listener, selector, *running.values()]
                    in_child = functools.partial(_close, held, wake_r, wake_w)
                    pid = _fork(conn, base_path, per_run, in_child)
                    if pid == 0:
                        return 0  # the child's script has run: its exit is the interpreter's
                    if pid > 0:
                        running[pid] = conn
                        selector.register(conn, selectors.EVENT_READ, pid)
                else:  # a shim closed its end: it is gone, so is its script
                    with contextlib.suppress(ProcessLookupError):
                        os.kill(key.data, signal.SIGKILL)
                    selector.unregister(key.fileobj)
            for pid, code in zygote.exited(running):
                conn = running.pop(pid)
                with contextlib.suppress(KeyError, ValueError):
                    selector.unregister(conn)
                with contextlib.suppress(OSError):
                    conn.sendall(json.dumps({"returncode": code}).encode() + b"\n")
                conn.close()
                idle_since = time.monotonic()
            if not path.exists() or (not running and time.monotonic() - idle_since > IDLE_S):
                for pid in running:
                    with contextlib.suppress(ProcessLookupError):
                        os.kill(pid, signal.SIGKILL)
                path.unlink(missing_ok=True)
                return 0


def _end_if_gone(directory: Path, started: threading.Event) -> None:
    """Until ``started`` is set: end the process once ``directory`` is gone."""
    while not started.wait(1):
        if not directory.exists():
            os._exit(0)


def _job_id_value(env: Mapping[str, str]) -> object:
    """``torch.compiler.config``'s ``job_id`` entry's environment value for ``env``, as
    torch reads it (the first of :data:`JOB_ID_ENV` set; "1" and "0" are booleans)."""
    from torch.utils import _config_module

    for name in JOB_ID_ENV:
        if name in env:
            return {"1": True, "0": False}.get(env[name], env[name])
    return _config_module._UNSET_SENTINEL


def _job_id_refreshable() -> bool:
    """Whether this torch's ``job_id`` entry holds what :func:`_job_id_value` says of the
    zygote's own environment (else a run with other values is refused)."""
    from torch.compiler import config

    entry = getattr(config, "_config", {}).get("job_id")
    if entry is None:
        return False
    expected = _job_id_value(os.environ)
    return entry.env_value_default is expected or entry.env_value_default == expected


def _refresh_job_id(env: Mapping[str, str]) -> None:
    """Give ``torch.compiler.config.job_id`` the run's value: torch reads its variables
    (:data:`JOB_ID_ENV`) when the config module is imported, in the zygote."""
    from torch.compiler import config

    config._config["job_id"].env_value_default = _job_id_value(env)  # type: ignore[attr-defined]


def _close(held: list[Any], *fds: int) -> None:
    """In a child: close what the zygote holds (its socket, selector, other shims' ends)."""
    for thing in held:
        thing.close()
    for fd in fds:
        os.close(fd)


def _fork(
    conn: socket.socket,
    base_path: list[str],
    per_run: frozenset[str],
    in_child: Callable[[], None],
) -> int:
    """Read one request with its descriptors from ``conn`` and fork its child: the pid
    (0 in the child, after its script ran), or -1 when the request was refused."""
    fds: list[int] = []
    try:
        message, fds, _, _ = socket.recv_fds(conn, 1 << 20, 3)
        while message and not message.endswith(b"\n"):  # the rest of a long request
            chunk = conn.recv(1 << 20)
            if not chunk:
                break
            message += chunk
        request = json.loads(message)
    except (OSError, ValueError):
        request = None
    if (
        request is None
        or len(fds) != 3
        or _read_at_import(os.environ, per_run) != _read_at_import(request["env"], per_run)
    ):
        for fd in fds:
            os.close(fd)
        with contextlib.suppress(OSError):
            conn.sendall(b'{"refused": true}\n')
        conn.close()
        return -1
    sys.stdout.flush()
    sys.stderr.flush()
    pid = os.fork()
    if pid == 0:
        in_child()
        conn.close()
        _refresh_job_id(request["env"])
        zygote._child(request, base_path, fds)
        return 0
    for fd in fds:
        os.close(fd)
    conn.sendall(json.dumps({"pid": pid}).encode() + b"\n")
    print(f"forked {pid} {request['argv'][0]}", file=sys.stderr, flush=True)  # counted
    return pid


def counts(directory: Path) -> tuple[int, int, int]:
    """(zygotes started, scripts forked, scripts run alone) in a session's directory."""
    logs = [path.read_text(errors="replace") for path in directory.glob("*.log")]
    forked = sum(line.startswith("forked ") for log in logs for line in log.splitlines())
    alone = directory / "alone.txt"
    ran_alone = len(alone.read_text().splitlines()) if alone.exists() else 0
    return len(list(directory.glob("*.started"))), forked, ran_alone


# -- the shim side -----------------------------------------------------------------------

_RELAYED = (
    signal.SIGTERM,
    signal.SIGINT,
    signal.SIGHUP,
    signal.SIGQUIT,
    signal.SIGUSR1,
    signal.SIGUSR2,
)


def shim(argv: list[str]) -> None:
    """tests/helpers/shim/python: run ``python argv...`` forked from a zygote when it is a
    script the zygote can run, else in the real interpreter. Does not return."""
    python = os.environ.get(PYTHON_ENV) or sys.executable
    directory = os.environ.get(DIR_ENV, "")
    env = {k: v for k, v in os.environ.items() if k not in SHIM_ENV}
    if directory and forkable(argv):
        code = _forked(python, Path(directory), argv, env)
        if code is not None:
            _exit_as(code)
        with contextlib.suppress(OSError), open(Path(directory, "alone.txt"), "a") as alone:
            alone.write(f"{' '.join(argv[:2])[:200]!r}\n")  # counted (:func:`counts`)
    elif directory and argv[:2] == ["-m", "torch.distributed.run"]:
        # torchrun itself runs for real, with the shim as its sys.executable: its workers
        # (``shim -u script``) are forked.
        env = dict(os.environ)
    os.execve(python, [python, *argv], env)


def forkable(argv: list[str]) -> bool:
    """Whether the shim asks a zygote to run ``python argv...``: a script, ``-m module``
    (not torchrun's launcher: its workers and signals are what its tests check) or
    ``-c code``, with no interpreter option before it but ``-u`` (torchrun starts its
    workers so; the child's stdout and stderr are then unbuffered, as ``-u`` makes them)."""
    if argv[:1] == ["-u"]:
        argv = argv[1:]
    if len(argv) >= 2 and argv[0] == "-m":
        return argv[1] not in NOT_FORKED_MODULES
    if len(argv) >= 2 and argv[0] == "-c":
        return True
    return bool(argv) and argv[0].endswith(".py") and not argv[0].startswith("-")


def _forked(python: str, directory: Path, argv: list[str], env: dict[str, str]) -> int | None:
    """The script's exit (as ``subprocess`` reports it), or None when no zygote ran it.
    A signal that comes before the child is known is relayed once it is (or, when no
    zygote runs the script, ends this process as it would have)."""
    child: list[int] = []
    pending: list[int] = []

    def relay(signum: int, _frame: object) -> None:
        if not child:
            pending.append(signum)
            return
        with contextlib.suppress(ProcessLookupError):
            os.kill(child[0], signum)

    for signum in _RELAYED:
        signal.signal(signum, relay)
    key = signature(python, env)
    path = directory / f"{key}.sock"
    answer: dict[str, int] = {}
    if path.exists() or _awaited(python, directory, key, env, pending):
        conn = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            conn.connect(str(path))
            request = {"argv": argv, "env": env, "cwd": os.getcwd()}
            socket.send_fds(conn, [json.dumps(request).encode() + b"\n"], [0, 1, 2])
            reader = conn.makefile("rb")
            answer = json.loads(reader.readline() or b"{}")
        except (OSError, ValueError):
            pass
    if "pid" not in answer:
        for relayed in _RELAYED:
            signal.signal(relayed, signal.SIG_DFL)
        for early in pending:
            _exit_as(-early)
        return None
    child.append(answer["pid"])
    for early in pending:
        relay(early, None)
    line = reader.readline()
    if not line:
        log = directory / f"{key}.log"
        tail = log.read_text(errors="replace")[-2000:] if log.exists() else ""
        print(
            f"[forkserver] the zygote ended before the script (pid {child[0]}); "
            f"the end of its log ({log}):\n{tail}",
            file=sys.stderr,
        )
        return 1
    return int(json.loads(line)["returncode"])


def _exit_as(code: int) -> None:
    """Exit as the child did: by the same signal, or with the same code."""
    if code < 0:
        with contextlib.suppress(OSError):  # SIGKILL and SIGSTOP have no handler
            signal.signal(-code, signal.SIG_DFL)
        os.kill(os.getpid(), -code)
        time.sleep(5)
        code = 128 - code
    os._exit(code)


def _awaited(
    python: str, directory: Path, key: str, env: Mapping[str, str], signalled: list[int]
) -> bool:
    """Whether the zygote for ``key`` is up, once this run has started it or waited for
    it: the run would import the same modules itself, so waiting costs it nothing. False
    (the run goes alone) when the session has its :data:`MAX_ZYGOTES`, when the zygote
    ended or took over :data:`START_WAIT_S`, or when a signal came meanwhile."""
    _start(python, directory, key, env)
    started = directory / f"{key}.started"
    pid_file = directory / f"{key}.pid"
    sock = directory / f"{key}.sock"
    deadline = time.monotonic() + START_WAIT_S
    while not sock.exists():
        if signalled or not started.exists() or time.monotonic() > deadline:
            return False
        with contextlib.suppress(OSError, ValueError):  # no pid yet
            if _ended(int(pid_file.read_text())):
                return False  # its log (``<key>.log``) says why
        time.sleep(0.05)
    return True


def _ended(pid: int) -> bool:
    """Whether process ``pid`` is gone or a zombie (nobody may reap a zygote soon)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except FileNotFoundError:
        return True
    return stat[stat.rindex(")") + 2 :].startswith(("Z", "X"))


def _start(python: str, directory: Path, key: str, env: Mapping[str, str]) -> None:
    """Start the zygote for ``key`` in the background (once, and at most
    :data:`MAX_ZYGOTES` in the session); its pid goes to ``<key>.pid``."""
    if len(list(directory.glob("*.started"))) >= MAX_ZYGOTES:
        return
    try:
        os.close(os.open(directory / f"{key}.started", os.O_CREAT | os.O_EXCL | os.O_WRONLY))
    except FileExistsError:
        return
    repo = Path(__file__).resolve().parents[2]
    variables = directory / f"{key}.env.json"  # what the zygote's runs share
    variables.write_text(json.dumps(_read_at_import(env), indent=1, sort_keys=True))
    # Started from a short-lived child, so that the script this process becomes (its
    # first run is not forked) does not have the zygote as its own child.
    middle = os.fork()
    if middle:
        os.waitpid(middle, 0)
        return
    try:
        with open(directory / f"{key}.log", "ab") as log:
            zygote_process = subprocess.Popen(
                [python, "-m", "tests.helpers.forkserver", str(directory / f"{key}.sock")],
                cwd=repo,
                env={
                    **env,
                    "PYTHONPATH": zygote.pythonpath(env),
                    # Its own (the ISA check builds there), not the first job's live cache.
                    "TORCHINDUCTOR_CACHE_DIR": str(directory / f"{key}.inductor"),
                },
                stdin=subprocess.DEVNULL,
                stdout=subprocess.DEVNULL,
                stderr=log,
                start_new_session=True,
            )
        staging = directory / f"{key}.pid.new"
        staging.write_text(str(zygote_process.pid))
        staging.rename(directory / f"{key}.pid")
    finally:
        os._exit(0)


if __name__ == "__main__":
    sys.exit(serve(Path(sys.argv[1])))
