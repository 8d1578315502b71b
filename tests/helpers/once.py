"""A session fixture's jobs run once per test run, not once per pytest-xdist worker.

A session-scoped fixture is set up in every worker that runs one of its tests, and
``--dist worksteal`` can spread a module's tests over several workers: each would run
the same jobs again. :func:`job_runs` runs them in the first worker that asks, under a
lock in the run's base directory (shared by its workers), and hands the others the
finished runs, whose trees stay in place until the run ends.
"""

from __future__ import annotations

import dataclasses
import fcntl
import json
import os
from collections.abc import Callable
from pathlib import Path

import pytest

from tests.helpers.jobs import JobRun


def job_runs(
    tmp_path_factory: pytest.TempPathFactory,
    name: str,
    make: Callable[[], dict[str, JobRun]],
) -> dict[str, JobRun]:
    """``make()`` once in this test run (its jobs under ``tmp_path_factory``'s dirs)."""
    if os.environ.get("PYTEST_XDIST_WORKER") is None:
        return make()
    root = tmp_path_factory.getbasetemp().parent  # this run's, above each worker's
    done = root / f"{name}.json"
    with open(root / f"{name}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if done.exists():
            kept = json.loads(done.read_text())
            return {key: JobRun(**{**run, "base": Path(run["base"])}) for key, run in kept.items()}
        runs = make()
        body = {k: {**dataclasses.asdict(run), "base": str(run.base)} for k, run in runs.items()}
        done.write_text(json.dumps(body))
        return runs
