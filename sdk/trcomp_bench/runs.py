"""What every harness of the benchmark shares: capped child runs, results written as they come.

Every measurement runs in its own process with a time cap (:func:`run_capped`):
the CPU benchmark's workers, the GPU script's runs and the GPU check's bodies.
The first run on a rented GPU must not lose its numbers to one slow compile,
so ``gpu_h200`` and ``gpu_check`` run their measurements through one loop
(:func:`run_jobs`: each job capped inside an overall budget), append each result to a JSON and a
markdown file at once (:class:`ResultLog`) and record the torch, triton
and CUDA versions and the GPU's name (:data:`VERSIONS_CODE`). Standard library
only: the parent never imports torch.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from trcomp_bench.results import write_text

__all__ = [
    "MARK",
    "VERSIONS_CODE",
    "CappedRun",
    "Job",
    "ResultLog",
    "add_job_arguments",
    "collect_versions",
    "marked_json",
    "run_capped",
    "run_jobs",
]

MARK = "TRCOMP_GPU_RESULT "
"""Prefix of the one stdout line in which a child reports its result as JSON."""

VERSIONS_CODE = """
import json, platform, sys
found = {"python": platform.python_version()}
try:
    import torch
    found["torch"] = torch.__version__
    found["cuda"] = torch.version.cuda
    found["cudnn"] = torch.backends.cudnn.version() if torch.cuda.is_available() else None
    found["gpu_count"] = torch.cuda.device_count() if torch.cuda.is_available() else 0
    found["gpus"] = [torch.cuda.get_device_name(i) for i in range(found["gpu_count"])]
    if found["gpu_count"]:
        found["capability"] = ".".join(map(str, torch.cuda.get_device_capability(0)))
        found["nccl"] = ".".join(map(str, torch.cuda.nccl.version()))
except Exception as exc:  # a broken torch or CUDA is what this probe reports
    found["torch_error"] = f"{type(exc).__name__}: {exc}"
for name in ("triton", "transformers", "accelerate"):
    try:
        found[name] = __import__(name).__version__
    except Exception:  # absent or broken: either way no version to report
        found[name] = None
print(json.dumps(found))
"""


def collect_versions(python: str = sys.executable, timeout_s: float = 120.0) -> dict[str, Any]:
    """torch/triton/CUDA versions and GPU names (from a child) and the driver (nvidia-smi)."""
    facts: dict[str, Any] = {}
    try:
        done = subprocess.run(
            [python, "-c", VERSIONS_CODE],
            capture_output=True,
            text=True,
            timeout=timeout_s,
            check=False,
        )
        lines = done.stdout.strip().splitlines()
        facts = json.loads(lines[-1]) if lines else {"error": done.stderr[-500:]}
    except (OSError, subprocess.TimeoutExpired, json.JSONDecodeError) as exc:
        facts = {"error": f"{type(exc).__name__}: {exc}"}
    try:
        smi = subprocess.run(
            ["nvidia-smi", "--query-gpu=driver_version", "--format=csv,noheader"],
            capture_output=True,
            text=True,
            timeout=30,
            check=False,
        )
        facts["driver"] = smi.stdout.strip().splitlines()[0] if smi.returncode == 0 else None
    except (OSError, subprocess.TimeoutExpired, IndexError):
        facts["driver"] = None
    return facts


@dataclass(frozen=True)
class CappedRun:
    """How a child ended: exit code (None: stopped at its cap), output, seconds."""

    returncode: int | None
    stdout: str
    stderr: str
    seconds: float

    @property
    def timed_out(self) -> bool:
        """Stopped at its cap (or the remaining budget)."""
        return self.returncode is None


def run_capped(
    command: Sequence[str],
    cap_s: float,
    *,
    env: Mapping[str, str] | None = None,
    cwd: str | os.PathLike[str] | None = None,
) -> CappedRun:
    """Run ``command`` for at most ``cap_s`` seconds, killing its whole process group after.

    The group is killed too when the parent is interrupted (Ctrl-C), so no
    compile worker outlives the run.
    """
    start = time.monotonic()
    proc = subprocess.Popen(
        list(command),
        env=dict(env) if env is not None else None,
        cwd=cwd,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
    )
    try:
        out, err = proc.communicate(timeout=max(1.0, cap_s))
        code: int | None = proc.returncode
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, 9)
        out, err = proc.communicate()
        code = None
    except BaseException:
        os.killpg(proc.pid, 9)
        proc.wait()
        raise
    return CappedRun(code, out or "", err or "", time.monotonic() - start)


def marked_json(stdout: str) -> Any:
    """The JSON of the last ``MARK`` line of a child's output (None when there is none)."""
    lines = [line for line in stdout.splitlines() if line.startswith(MARK)]
    return json.loads(lines[-1][len(MARK) :]) if lines else None


@dataclass
class ResultLog:
    """Results written to ``<stem>.json`` and ``<stem>.md`` after every :meth:`add`.

    ``render`` turns the whole log into markdown; both files are replaced
    atomically, so a run stopped at any point leaves readable files.
    """

    stem: Path
    meta: dict[str, Any]
    render: Callable[[ResultLog], str]
    entries: list[dict[str, Any]] = field(default_factory=list)

    def add(self, entry: Mapping[str, Any]) -> None:
        """Append one result and rewrite both files."""
        self.entries.append(dict(entry))
        self.write()

    def write(self) -> None:
        """Rewrite the JSON and markdown files from what the log holds."""
        body = {"meta": self.meta, "results": self.entries}
        write_text(self.stem.with_suffix(".json"), json.dumps(body, indent=2, default=str) + "\n")
        write_text(self.stem.with_suffix(".md"), self.render(self) + "\n")


@dataclass(frozen=True)
class Job:
    """One capped run of a harness.

    ``keys`` name its log entry (``{"model": ..., "backend": ...}``); ``run(cap_s)``
    returns the rest of the entry, ``status`` first ("ok..." or "skipped..."
    when nothing failed).
    """

    name: str
    keys: Mapping[str, Any]
    cap_s: float
    run: Callable[[float], dict[str, Any]]


def run_jobs(
    jobs: Sequence[Job],
    log: ResultLog,
    *,
    deadline: float,
    min_cap_s: float,
    skipped: str,
    tag: str,
) -> bool:
    """Run ``jobs`` in order, each capped by its own limit and the time left before ``deadline``.

    A job whose cap would be under ``min_cap_s`` is logged with status ``skipped``;
    a job that raises is logged as an error. Every entry is written at once.
    Returns True when any job failed or was skipped for want of time.
    """
    failed = False
    for job in jobs:
        cap = min(job.cap_s, deadline - time.monotonic())
        if cap < min_cap_s:
            log.add({**job.keys, "status": skipped})
            failed = True
            continue
        print(f"[{tag}] {job.name} (cap {cap:.0f} s) ...", file=sys.stderr, flush=True)
        start = time.monotonic()
        try:
            result = job.run(cap)
        except Exception as exc:  # a broken job is a result too
            result = {"status": f"error: {type(exc).__name__}: {exc}"}
        result.setdefault("seconds", round(time.monotonic() - start, 1))
        log.add({**job.keys, **result})
        status = str(result.get("status", ""))
        failed |= not status.startswith(("ok", "skipped"))
        print(f"[{tag}] {job.name}: {status[:200]}", file=sys.stderr, flush=True)
    return failed


def add_job_arguments(
    parser: argparse.ArgumentParser, *, out: str, out_help: str, budget_s: float
) -> None:
    """The options both budgeted commands share: --out, --budget-s, --steps, --dry-run,
    --torch-version."""
    parser.add_argument("--out", default=out, help=out_help)
    parser.add_argument(
        "--budget-s",
        type=float,
        default=budget_s,
        help="whole-run limit; later runs skip once spent (default: %(default)s)",
    )
    parser.add_argument("--steps", type=int, default=20, help="timed steps (default: 20)")
    parser.add_argument(
        "--dry-run", action="store_true", help="tiny models on CPU: checks the script, not the GPU"
    )
    parser.add_argument(
        "--torch-version",
        help="run on this torch (2.9, 2.14): this Python when its torch is that version, else "
        "the one TRCOMP_PROCESS_PYTHON_<MAJOR>_<MINOR> names (default: this Python's torch)",
    )
