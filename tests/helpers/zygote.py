"""Run scripts as processes forked from one that has already imported torch's compiler stack.

Most of a small corpus job's time is importing torch, dynamo and inductor
(docs/timings.md): the same imports, from the same files, in every job. A zygote
is a Python process started once, in an environment like the jobs' and without
trcomp's hook on, that imports those modules and then forks one child per
script. A child takes the script's environment, working directory, ``sys.path``
and ``sys.argv``, starts trcomp's start-up hook as ``sitecustomize`` would (the
hook runs its callbacks for the modules already imported:
``AfterImport.run_imported``), and runs the script as ``__main__``; its exit, at
exit handlers included, is the interpreter's. Its output goes to a file.

Only a run whose environment matches the zygote's in everything read while
importing (:func:`differs`: torch's, inductor's, OpenMP's, Python's variables) is
forked; :func:`Zygote.start` returns None for any other, and the caller starts a
real process.

Protocol: one JSON object per line. The test writes ``{"id", "argv", "env",
"cwd", "log"}`` on the zygote's stdin; the zygote answers ``{"id", "pid"}`` when
the child is started and ``{"id", "returncode"}`` when it has exited (negative:
the signal that ended it, as ``subprocess`` says).
"""

from __future__ import annotations

import contextlib
import io
import json
import os
import selectors
import signal
import subprocess
import sys
import time
from collections.abc import Mapping
from pathlib import Path
from typing import IO, Any

# What the zygote imports before forking: torch, then what a compiling job imports next.
PRELOAD = (
    "torch",
    "torch._dynamo",
    "torch._inductor.config",
    "torch._inductor.codecache",
    "torch._inductor.compile_fx",
    "torch._dynamo.repro.after_dynamo",
    "torch.utils.cpp_extension",
    "numpy",
)
# Variables read while those modules are imported, or by the interpreter at its start:
# a run must have the zygote's values (or lack them, as it does).
IMPORT_TIME = (
    "TORCH",
    "PYTORCH",
    "TRITON",
    "CUDA",
    "OMP_",
    "KMP_",
    "MKL",
    "GOMP",
    "LD_",
    "PYTHON",
    "XLA",
    "PJRT",
    "JAX",
    "USE_",
    "HF_",
    "TRANSFORMERS",
    "TMPDIR",
    "HOME",
)


# Rebuilt for each child (PYTHONPATH), or read only when used (Triton reads its cache dir
# when it keeps a kernel): these may differ.
PER_RUN = frozenset({"PYTHONPATH", "TRITON_CACHE_DIR"})


def differs(
    zygote_env: Mapping[str, str], env: Mapping[str, str], per_run: frozenset[str] = PER_RUN
) -> list[str]:
    """Variables read at import time whose values differ between the two environments."""
    names = {*zygote_env, *env} - per_run
    return sorted(
        name
        for name in names
        if name.startswith(IMPORT_TIME) and zygote_env.get(name) != env.get(name)
    )


class Run:
    """A forked script, shaped like the part of ``subprocess.Popen`` the corpus uses."""

    def __init__(self, zygote: Zygote, ident: int, log: Path) -> None:
        self._zygote = zygote
        self.ident = ident
        self.log = log
        self.pid: int | None = None
        self.returncode: int | None = None

    def communicate(self, timeout: float | None = None) -> tuple[str, None]:
        self._zygote.wait(self, timeout)
        return self.log.read_text(errors="replace") if self.log.exists() else "", None

    def kill(self) -> None:
        if self.pid is not None and self.returncode is None:
            with contextlib.suppress(ProcessLookupError):
                os.kill(self.pid, signal.SIGKILL)


class Zygote:
    """One zygote process (per pytest worker): :meth:`start` forks a script from it."""

    def __init__(self, env: Mapping[str, str], stderr: Path) -> None:
        self.env = dict(env)
        zygote_env = {k: v for k, v in env.items() if not k.startswith("TRCOMP_")}
        self._stderr = stderr.open("w")
        self._process = subprocess.Popen(
            [sys.executable, "-m", "tests.helpers.zygote"],
            env={**zygote_env, "PYTHONPATH": pythonpath(env)},
            cwd=Path(__file__).resolve().parents[2],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=self._stderr,
            text=True,
        )
        self._runs: dict[int, Run] = {}
        self._next = 0
        self._pending = b""  # read from the zygote's stdout, not yet a whole line

    @property
    def pid(self) -> int:
        """The zygote process's id."""
        return self._process.pid

    def start(self, argv: list[str], env: Mapping[str, str], cwd: Path, log: Path) -> Run | None:
        """Fork ``argv`` (``[python, script, args...]``); None when it must run for real."""
        if self._process.poll() is not None or differs(self.env, env):
            return None
        self._next += 1
        run = Run(self, self._next, log)
        self._runs[run.ident] = run
        request = {"id": run.ident, "argv": argv[1:], "env": dict(env), "cwd": str(cwd)}
        assert self._process.stdin is not None
        self._process.stdin.write(json.dumps({**request, "log": str(log)}) + "\n")
        self._process.stdin.flush()
        return run

    def wait(self, run: Run, timeout: float | None) -> None:
        """Read the zygote's answers until ``run`` has exited (``TimeoutExpired`` after
        ``timeout`` seconds). Answers are read from the raw pipe: a buffered reader could
        hold a second answer where the next ``select`` would not see it."""
        deadline = None if timeout is None else time.monotonic() + timeout
        assert self._process.stdout is not None
        fd = self._process.stdout.fileno()
        while run.returncode is None:
            if b"\n" not in self._pending:
                left = None if deadline is None else deadline - time.monotonic()
                if left is not None and left <= 0:
                    raise subprocess.TimeoutExpired(run.log.name, timeout or 0)
                with selectors.DefaultSelector() as selector:
                    selector.register(fd, selectors.EVENT_READ)
                    if not selector.select(left):
                        continue
                chunk = os.read(fd, 1 << 16)
                if not chunk:
                    raise RuntimeError(
                        f"the zygote exited ({self._process.wait()}): see its stderr"
                    )
                self._pending += chunk
                continue
            line, self._pending = self._pending.split(b"\n", 1)
            answer = json.loads(line)
            target = self._runs[answer["id"]]
            if "pid" in answer:
                target.pid = answer["pid"]
            else:
                target.returncode = answer["returncode"]

    def close(self) -> None:
        if self._process.poll() is None:
            assert self._process.stdin is not None
            self._process.stdin.close()
            try:
                self._process.wait(timeout=30)
            except subprocess.TimeoutExpired:
                self._process.kill()
        self._stderr.close()


def pythonpath(env: Mapping[str, str]) -> str:
    """The zygote's ``PYTHONPATH``: the run's, less trcomp's hook (off in the zygote)."""
    return os.pathsep.join(
        entry
        for entry in env.get("PYTHONPATH", "").split(os.pathsep)
        if entry and not Path(entry, "sitecustomize.py").is_file()
    )


# -- the zygote process ------------------------------------------------------------------


def _child(request: dict[str, Any], base_path: list[str], fds: list[int] | None = None) -> None:
    """In the forked child: become the run's process, start the hook, run ``argv`` as the
    interpreter would (``script.py ...``, ``-m module ...`` or ``-c code ...``). Its
    stdin, stdout and stderr: ``fds`` (a caller's own, tests/helpers/forkserver.py),
    else nothing, and the request's log file."""
    signal.signal(signal.SIGCHLD, signal.SIG_DFL)
    signal.set_wakeup_fd(-1)
    if fds is None:
        log = os.open(request["log"], os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
        fds = [os.open(os.devnull, os.O_RDONLY), log, log]
    for target, fd in enumerate(fds):
        os.dup2(fd, target)
    for fd in set(fds) - {0, 1, 2}:
        os.close(fd)
    os.chdir(request["cwd"])
    os.environ.clear()
    os.environ.update(request["env"])
    argv = request["argv"]
    if argv[0] == "-u":  # as the interpreter's -u: stdout and stderr unbuffered
        argv = argv[1:]
        _unbuffered()
    path = [p for p in request["env"].get("PYTHONPATH", "").split(os.pathsep) if p]
    # sys.path[0] as the interpreter sets it: the script's directory, the working
    # directory for -m, "" for -c.
    if argv[0] == "-m":
        first = os.getcwd()
    elif argv[0] == "-c":
        first = ""
    else:
        first = os.path.dirname(os.path.abspath(argv[0]))
    sys.path[:] = [first, *path, *base_path]
    import runpy

    # What the interpreter's start-up does with trcomp's hook on PYTHONPATH: it imports
    # the first ``sitecustomize`` there (the zygote's own PYTHONPATH has none: pythonpath).
    hooks = [os.path.join(p, "sitecustomize.py") for p in path]
    hook = next((h for h in hooks if os.path.isfile(h)), None)
    if hook is not None:
        runpy.run_path(hook, run_name="sitecustomize")
    if argv[0] == "-m":
        sys.argv[:] = [argv[1], *argv[2:]]  # run_module puts the module's file first
        runpy.run_module(argv[1], run_name="__main__", alter_sys=True)
    elif argv[0] == "-c":
        sys.argv[:] = ["-c", *argv[2:]]
        import builtins
        import importlib.machinery
        import types

        main = types.ModuleType("__main__")  # the zygote's own stays its functions' globals
        main.__builtins__ = builtins  # type: ignore[attr-defined]
        main.__loader__ = importlib.machinery.BuiltinImporter  # type: ignore[assignment]
        sys.modules["__main__"] = main
        exec(compile(argv[1], "<string>", "exec"), vars(main))
    else:
        script = os.path.abspath(argv[0])
        sys.argv[:] = [script, *argv[1:]]
        runpy.run_path(script, run_name="__main__")


def _unbuffered() -> None:
    """``sys.stdout`` and ``sys.stderr`` as ``python -u`` makes them: no buffer under the
    text layer, every write passed through."""
    for name, fd in (("stdout", 1), ("stderr", 2)):
        old = getattr(sys, name)
        stream = io.TextIOWrapper(
            io.FileIO(fd, "w", closefd=False),
            encoding=old.encoding,
            errors=old.errors,
            write_through=True,
        )
        setattr(sys, name, stream)
        setattr(sys, f"__{name}__", stream)


def exited(children: Mapping[int, object]) -> list[tuple[int, int]]:
    """The ``children`` that have exited, each with its exit as ``subprocess`` says it.
    Only these are reaped: another child (a compile worker torch started) is not ours."""
    done = []
    for pid in list(children):
        with contextlib.suppress(ChildProcessError):
            reaped, status = os.waitpid(pid, os.WNOHANG)
            if reaped:
                done.append((pid, os.waitstatus_to_exitcode(status)))
    return done


def _warm() -> None:
    """What inductor works out once per process and keeps (``functools.cache``), the same
    in every child: the CPU's vector ISAs (each load check in a fork of this process:
    tests/helpers/vec_isa.py), the hashes of torch's source and of the system in its
    cache keys."""
    from torch._inductor import codecache

    from tests.helpers import vec_isa

    vec_isa.pick_in_this_process()
    codecache.torch_key()
    codecache.CacheBase.get_system()


def prepare() -> tuple[list[str], int, int]:
    """A zygote's start (this one's and tests/helpers/forkserver.py's): import
    :data:`PRELOAD` and warm inductor, then wake the zygote's ``select`` on SIGCHLD.
    Returns the ``sys.path`` a child builds on (less the zygote's own ``PYTHONPATH``
    entries and working directory) and the wake-up pipe's two ends."""
    for name in PRELOAD:
        __import__(name)
    _warm()
    own = {p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p}
    base_path = [p for p in sys.path[1:] if p not in own]
    wake_r, wake_w = os.pipe()
    os.set_blocking(wake_w, False)
    signal.set_wakeup_fd(wake_w)
    signal.signal(signal.SIGCHLD, lambda *_: None)
    return base_path, wake_r, wake_w


def _zygote() -> int:
    base_path, wake_r, wake_w = prepare()
    running: dict[int, int] = {}
    out: IO[str] = sys.stdout
    pending = b""
    with selectors.DefaultSelector() as selector:
        selector.register(0, selectors.EVENT_READ)
        selector.register(wake_r, selectors.EVENT_READ)
        open_input = True
        while open_input or running:
            requests = []
            for key, _ in selector.select():
                if key.fileobj == wake_r:
                    os.read(wake_r, 4096)
                    continue
                chunk = os.read(0, 1 << 20)  # the raw fd: a buffered line would wait unseen
                if not chunk:
                    open_input = False
                    selector.unregister(0)
                    continue
                *lines, pending = (pending + chunk).split(b"\n")
                requests += [json.loads(line) for line in lines if line.strip()]
            for request in requests:
                out.flush()
                sys.stderr.flush()
                pid = os.fork()
                if pid == 0:
                    selector.close()
                    os.close(wake_r)
                    os.close(wake_w)
                    _child(request, base_path)
                    return 0
                running[pid] = request["id"]
                out.write(json.dumps({"id": request["id"], "pid": pid}) + "\n")
                out.flush()
            for pid, code in exited(running):
                out.write(json.dumps({"id": running.pop(pid), "returncode": code}) + "\n")
                out.flush()
    return 0


if __name__ == "__main__":
    sys.exit(_zygote())
