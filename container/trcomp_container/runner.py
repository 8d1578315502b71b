"""Run a :class:`~trcomp_container.launch.LaunchPlan`: the only module that starts the script.

The script runs in its own process group, so SIGTERM (StopTrainingJob, or
Ctrl-C in local mode) reaches every process it started, torchrun workers
included; after a grace period the group gets SIGKILL. Standard error is
passed through and its tail kept for the failure file.
"""

from __future__ import annotations

import collections
import contextlib
import os
import signal
import socket
import subprocess
import sys
import threading
import time
from dataclasses import dataclass
from types import FrameType
from typing import IO

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


def _signal_group(pgid: int, signum: int) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pgid, signum)


def run(plan: LaunchPlan, grace_s: float) -> RunResult:
    """Start the plan, forward SIGTERM/SIGINT to its group, wait, and report."""
    started = time.monotonic()
    proc = subprocess.Popen(
        plan.command,
        env=plan.env,
        cwd=plan.cwd,
        stderr=subprocess.PIPE,
        start_new_session=True,
    )
    assert proc.stderr is not None
    tail: collections.deque[bytes] = collections.deque()
    reader = threading.Thread(target=_tee, args=(proc.stderr, sys.stderr.buffer, tail), daemon=True)
    reader.start()
    stopped: list[int] = []

    def forward(signum: int, frame: FrameType | None) -> None:
        if stopped:
            return
        stopped.append(signum)
        print(
            f"[trcomp] received {signal.Signals(signum).name}: forwarding SIGTERM to the "
            f"training processes; SIGKILL in {grace_s:.0f} s unless they exit",
            file=sys.stderr,
            flush=True,
        )
        _signal_group(proc.pid, signal.SIGTERM)
        timer = threading.Timer(grace_s, _signal_group, args=(proc.pid, signal.SIGKILL))
        timer.daemon = True
        timer.start()

    previous = {sig: signal.signal(sig, forward) for sig in (signal.SIGTERM, signal.SIGINT)}
    try:
        returncode = proc.wait()
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)
    # Leftovers (data loader workers, compile workers) must not outlive the job.
    _signal_group(proc.pid, signal.SIGKILL)
    reader.join(timeout=5)
    text = b"".join(tail).decode("utf-8", errors="replace")
    return RunResult(
        returncode=returncode,
        stopped_by=stopped[0] if stopped else None,
        stderr_tail=text,
        duration_s=time.monotonic() - started,
    )
