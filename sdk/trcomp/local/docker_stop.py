"""Stopping a Docker local-mode job's containers: on Ctrl-C, on SIGTERM, and when ``fit()`` dies.

Every container of a job carries the label ``JOB_LABEL=<job id>``; stopping the
job means ``docker stop`` on those containers (SIGTERM to the image's
entrypoint, which passes it to ``train``, whose runner gives the script its
grace period), with a timeout longer than that grace period so the grace
periods nest (:func:`trcomp.contract.proctree.outer_grace_s`).

The SDK runs docker compose itself, so ``fit()`` cannot make compose a child
that dies with it. :func:`watch` starts a small watcher process instead: it
gets SIGTERM from the kernel if the ``fit()`` process dies (parent-death
signal), stops the job's containers and exits. ``python -m
trcomp.local.docker_stop <job id> <seconds>`` is that watcher.
"""

from __future__ import annotations

import signal
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from types import FrameType

from trcomp import docker_cli
from trcomp.contract.proctree import StopOnSignals, TreeProcess

__all__ = [
    "JOB_LABEL",
    "kill_containers",
    "remove_containers",
    "stop_containers",
    "stop_on_signals",
    "watch",
]

JOB_LABEL = "com.trcomp.local-job"
"""Docker label on every container of a local-mode job; its value identifies the job."""


def _label(job_id: str) -> str:
    return f"{JOB_LABEL}={job_id}"


def stop_containers(job_id: str, grace: float) -> list[str]:
    """Stop every container of the job (SIGTERM, SIGKILL after ``grace``); return their ids."""
    return docker_cli.stop_labelled(_label(job_id), grace)


def kill_containers(job_id: str) -> None:
    """SIGKILL every container of the job now."""
    docker_cli.kill_labelled(_label(job_id))


def remove_containers(job_id: str, grace: float) -> None:
    """Stop and remove every container of the job."""
    docker_cli.remove_labelled(_label(job_id), grace)


def stop_on_signals(job_id: str, name: str, grace: float) -> StopOnSignals:
    """SIGINT/SIGTERM stop the job's containers; a second Ctrl-C kills them."""
    return StopOnSignals(
        lambda signum: stop_containers(job_id, grace),
        lambda: kill_containers(job_id),
        what=f"job {name}'s containers",
        grace=grace,
    )


@contextmanager
def watch(job_id: str, grace: float) -> Iterator[None]:
    """Inside this block, the job's containers are stopped if this process dies."""
    watcher = TreeProcess(
        [sys.executable, "-m", "trcomp.local.docker_stop", job_id, str(grace)],
        parent_death_signal=signal.SIGTERM,
    )
    try:
        yield
    finally:
        watcher.kill()  # SIGKILL: it stops nothing on the way out
        watcher.popen.wait()


def _watch_main(job_id: str, grace: float) -> None:
    def parent_died(signum: int, frame: FrameType | None) -> None:
        stop_containers(job_id, grace)
        remove_containers(job_id, grace)
        raise SystemExit(0)

    signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C is for fit(), which stops the job
    signal.signal(signal.SIGTERM, parent_died)
    while True:
        signal.pause()


if __name__ == "__main__":
    _watch_main(sys.argv[1], float(sys.argv[2]))
