"""Start a job's process tree, stop it on Ctrl-C or SIGTERM, and never leave it behind.

One helper for the three places that run a job: process mode (``fit()`` runs
``train``), Docker local mode (``fit()`` runs docker compose) and the
in-container runner (``train`` runs the user's script). They behave alike:

- the first SIGINT or SIGTERM is passed on as SIGTERM (what SageMaker's
  StopTrainingJob sends), so the script can save a checkpoint;
- after a grace period the whole tree gets SIGKILL: every descendant found
  under ``/proc`` and every process group among them, so processes that
  started their own session (the runner's script) go too;
- a second Ctrl-C kills the tree at once;
- the child gets a parent-death signal (Linux ``PR_SET_PDEATHSIG``): if the
  process that started it dies, even by SIGKILL, the child is told to stop.

Grace periods nest: whoever stops a tree waits longer than the tree's own
runner waits for its script (:func:`outer_grace_s`), so the inner runner
always gets to kill what it started and write its report first.

Standard library only: the container imports this module too.
"""

from __future__ import annotations

import contextlib
import ctypes
import ctypes.util
import os
import signal
import subprocess
import sys
import threading
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from types import FrameType
from typing import IO, Any

from trcomp.contract.env import GRACE_ENV

__all__ = [
    "DEFAULT_GRACE_S",
    "GRACE_ENV",
    "GRACE_MARGIN_S",
    "StopOnSignals",
    "TreeProcess",
    "descendants",
    "grace_s",
    "kill_tree",
    "outer_grace_s",
]

"""Seconds a job's script gets between SIGTERM and SIGKILL."""
DEFAULT_GRACE_S = 100.0
"""SageMaker sends SIGKILL 120 s after StopTrainingJob; leave time to write the summary."""
GRACE_MARGIN_S = 10.0
"""How much longer an outer stopper waits than the runner inside it."""

_PR_SET_PDEATHSIG = 1


def grace_s(environ: Mapping[str, str] = os.environ) -> float:
    """The script's grace period: ``TRCOMP_SIGTERM_GRACE_S``, else 100 s."""
    value = environ.get(GRACE_ENV, "")
    try:
        return max(0.0, float(value)) if value else DEFAULT_GRACE_S
    except ValueError:
        return DEFAULT_GRACE_S


def outer_grace_s(environ: Mapping[str, str] = os.environ) -> float:
    """How long a stopper waits for a runner whose script has :func:`grace_s`."""
    return grace_s(environ) + GRACE_MARGIN_S


def descendants(pid: int) -> list[int]:
    """Every living descendant of ``pid``, read from ``/proc`` (children before grandchildren)."""
    children: dict[int, list[int]] = {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
        except OSError:
            continue
        # The command name (field 2) may hold spaces and parentheses: split after the last ')'.
        fields = stat[stat.rfind(")") + 2 :].split()
        children.setdefault(int(fields[1]), []).append(int(entry.name))
    found: list[int] = []
    queue = [pid]
    while queue:
        for child in children.get(queue.pop(0), []):
            found.append(child)
            queue.append(child)
    return found


def kill_tree(pid: int, signum: int = signal.SIGKILL) -> None:
    """Send ``signum`` to ``pid``, all its descendants and every process group among them.

    Our own process and process group are never signalled.
    """
    pids = [pid, *descendants(pid)]
    groups = set()
    for member in pids:
        with contextlib.suppress(OSError):
            groups.add(os.getpgid(member))
    groups.discard(os.getpgrp())
    for group in groups:
        with contextlib.suppress(OSError):
            os.killpg(group, signum)
    for member in pids:
        if member != os.getpid():
            with contextlib.suppress(OSError):
                os.kill(member, signum)


def _parent_death_hook(signum: int) -> Callable[[], None]:
    """A ``preexec_fn`` that asks Linux to send ``signum`` to the child when we die."""
    if not sys.platform.startswith("linux"):
        return lambda: None
    libc = ctypes.CDLL(ctypes.util.find_library("c") or None, use_errno=True)
    parent = os.getpid()

    def hook() -> None:
        libc.prctl(_PR_SET_PDEATHSIG, signum, 0, 0, 0)
        # The parent may have died before prctl: then no signal would ever come.
        if os.getppid() != parent:
            os.kill(os.getpid(), signum)

    return hook


class StopOnSignals:
    """Inside this block, SIGINT/SIGTERM stop a job instead of raising in the main thread.

    The first signal calls ``stop(signum)`` (in a thread, so the main thread keeps
    draining output); a second SIGINT, or the first one after ``stop`` has
    given up, calls ``kill()`` at once. ``received`` is the first signal, for the
    caller to raise on once the job has ended. Outside the main thread this
    does nothing (Python delivers signals to the main thread only).
    """

    def __init__(
        self,
        stop: Callable[[int], object],
        kill: Callable[[], object],
        *,
        what: str,
        grace: float,
        signals: Sequence[int] = (signal.SIGINT, signal.SIGTERM),
    ) -> None:
        self._stop = stop
        self._kill = kill
        self.what = what
        self.grace = grace
        self.signals = tuple(signals)
        self.received: int | None = None
        self.killed = False
        self._previous: dict[int, Any] = {}
        self._stopper: threading.Thread | None = None

    def __enter__(self) -> StopOnSignals:
        if threading.current_thread() is not threading.main_thread():
            return self
        for signum in self.signals:
            previous = signal.getsignal(signum)
            if previous in (signal.SIG_IGN, None):
                continue  # the caller chose to ignore it (nohup): so do we
            self._previous[signum] = previous
            signal.signal(signum, self._on_signal)
        return self

    def _on_signal(self, signum: int, frame: FrameType | None) -> None:
        name = signal.Signals(signum).name
        if self.received is None:
            self.received = signum
            print(
                f"\n[trcomp] {name}: stopping {self.what} (SIGTERM; SIGKILL in "
                f"{self.grace:.0f} s unless it ends; press Ctrl-C again to kill it now)",
                file=sys.stderr,
                flush=True,
            )
            self._stopper = threading.Thread(target=self._stop, args=(signum,), daemon=True)
            self._stopper.start()
        elif signum == signal.SIGINT and not self.killed:
            self.killed = True
            print(f"\n[trcomp] {name} again: killing {self.what} now", file=sys.stderr, flush=True)
            self._kill()

    def __exit__(self, *exc: object) -> None:
        for signum, previous in self._previous.items():
            signal.signal(signum, previous)
        self._previous.clear()
        if self._stopper is not None:
            self._stopper.join(timeout=self.grace + GRACE_MARGIN_S)


class TreeProcess:
    """A child started in its own session, stopped and killed as a whole tree.

    ``parent_death_signal`` goes to the child if this process dies first: SIGTERM
    for a child that stops its own tree (``train``), SIGKILL for one that
    cannot be trusted to (a user's script).
    """

    def __init__(
        self,
        command: Sequence[str],
        *,
        env: Mapping[str, str] | None = None,
        cwd: str | os.PathLike[str] | None = None,
        stdout: int | IO[Any] | None = None,
        stderr: int | IO[Any] | None = None,
        parent_death_signal: int = signal.SIGTERM,
    ) -> None:
        self.popen = subprocess.Popen(
            list(command),
            env=dict(env) if env is not None else None,
            cwd=cwd,
            stdout=stdout,
            stderr=stderr,
            start_new_session=True,
            preexec_fn=_parent_death_hook(parent_death_signal),
        )
        self.pid = self.popen.pid
        self._timer: threading.Timer | None = None

    def terminate(self, grace: float) -> None:
        """SIGTERM to the child's process group; SIGKILL to the whole tree after ``grace``."""
        with contextlib.suppress(OSError):
            os.killpg(self.pid, signal.SIGTERM)
        if self._timer is None:
            self._timer = threading.Timer(grace, self.kill)
            self._timer.daemon = True
            self._timer.start()

    def kill(self) -> None:
        """SIGKILL the child, every descendant and their process groups, now."""
        if self.popen.returncode is None:
            kill_tree(self.pid)
        else:  # reaped: its pid may be reused; only its group is still ours to kill
            with contextlib.suppress(OSError):
                os.killpg(self.pid, signal.SIGKILL)

    def wait(self, grace: float, what: str) -> tuple[int, int | None, bool]:
        """Wait for the child, stopping it on SIGINT/SIGTERM; ``(returncode, signal, killed)``.

        Leftovers of the child's process group (data loader or compile workers)
        are killed once it has ended.
        """
        guard = StopOnSignals(lambda _: self.terminate(grace), self.kill, what=what, grace=grace)
        try:
            with guard:
                returncode = self.popen.wait()
        finally:
            if self._timer is not None:
                self._timer.cancel()
            if self.popen.returncode is None:  # an exception while waiting: leave nothing
                self.kill()
                self.popen.wait()
            with contextlib.suppress(OSError):
                os.killpg(self.pid, signal.SIGKILL)
        return returncode, guard.received, guard.killed
