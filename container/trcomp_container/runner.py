"""Run a :class:`~trcomp_container.launch.LaunchPlan`: the only module that starts the script.

The script runs in its own session (:class:`trcomp.contract.proctree.TreeProcess`), so
SIGTERM (StopTrainingJob, or Ctrl-C in local mode) reaches every process it
started, torchrun workers included; after a grace period the whole tree gets
SIGKILL, and a second Ctrl-C kills it at once. Standard error is passed
through and its tail kept for the failure file.
"""

from __future__ import annotations

import collections
import os
import signal
import socket
import subprocess
import sys
import threading
import time
from dataclasses import dataclass
from typing import IO

from trcomp.contract.proctree import TreeProcess
from trcomp_container.launch import LaunchPlan

__all__ = ["RunResult", "run", "wait_for_hosts"]

_TAIL_BYTES = 16_384
_HOST_WAIT_S = 15 * 60


@dataclass(frozen=True)
class RunResult:
    """How the script ended."""

    returncode: int
    stopped_by: int | None
    stderr_tail: str
    duration_s: float


def wait_for_hosts(hosts: list[str], timeout_s: float = _HOST_WAIT_S) -> None:
    """Wait until every host resolves, as SageMaker's toolkit does before it starts."""
    deadline = time.monotonic() + timeout_s
    for host in hosts:
        delay = 0.1
        while True:
            try:
                socket.gethostbyname(host)
                break
            except OSError:
                if time.monotonic() > deadline:
                    raise
                time.sleep(delay)
                delay = min(delay * 2, 30.0)


def _tee(source: IO[bytes], sink: IO[bytes], tail: collections.deque[bytes]) -> None:
    size = 0
    while chunk := os.read(source.fileno(), 65536):
        sink.write(chunk)
        sink.flush()
        tail.append(chunk)
        size += len(chunk)
        while size > _TAIL_BYTES and len(tail) > 1:
            size -= len(tail.popleft())


def run(plan: LaunchPlan, grace_s: float) -> RunResult:
    """Start the plan, stop its tree on SIGTERM/SIGINT (SIGKILL after ``grace_s``), report."""
    started = time.monotonic()
    # If `train` itself dies (killed from outside), nobody is left to enforce the
    # grace period: the script is killed with it.
    tree = TreeProcess(
        plan.command,
        env=plan.env,
        cwd=plan.cwd,
        stderr=subprocess.PIPE,
        parent_death_signal=signal.SIGKILL,
    )
    stderr = tree.popen.stderr
    assert stderr is not None
    tail: collections.deque[bytes] = collections.deque()
    reader = threading.Thread(target=_tee, args=(stderr, sys.stderr.buffer, tail), daemon=True)
    reader.start()
    returncode, stopped_by, _ = tree.wait(grace_s, "the training processes")
    reader.join(timeout=5)
    text = b"".join(tail).decode("utf-8", errors="replace")
    return RunResult(
        returncode=returncode,
        stopped_by=stopped_by,
        stderr_tail=text,
        duration_s=time.monotonic() - started,
    )
