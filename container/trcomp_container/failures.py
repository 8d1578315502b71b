"""The failure contract: one failure file, an actionable reason, a meaningful exit code.

Exit codes follow the shell convention for signals (``128 + signal``: 137 is
SIGKILL, usually the kernel's out-of-memory killer; 143 is SIGTERM) and
``sysexits.h`` for the entrypoint's own refusals, so the code alone says which
side failed. A script's own non-zero exit code is passed through unchanged.
"""

from __future__ import annotations

import enum
import re
import signal
from pathlib import Path

__all__ = ["ExitCode", "JobFailed", "describe_exit", "torchrun_root_cause", "write_failure"]

_FAILURE_FILE_CHARS = 16_384
# torchrun's error summary: "Root Cause (first observed failure):" then, per
# failed worker, "rank : 1 (local_rank: 1)" and "exitcode : -9 (pid: 123)".
_ROOT_CAUSE = re.compile(
    r"Root Cause \(first observed failure\):.*?^\s*rank\s*:\s*(\d+).*?"
    r"^\s*exitcode\s*:\s*(-?\d+)",
    re.DOTALL | re.MULTILINE,
)


class ExitCode(enum.IntEnum):
    """Exit codes of the entrypoint when it refuses or loses the job itself."""

    OK = 0
    CONFIG = 64  # EX_USAGE: the compiler config or the job's parameters are invalid
    NO_ENTRY_POINT = 66  # EX_NOINPUT: the entry point is missing
    COMPILER_UNAVAILABLE = 69  # EX_UNAVAILABLE: the backend cannot start or cannot drive the GPUs
    INTERNAL = 70  # EX_SOFTWARE: a bug in trcomp itself
    KILLED = 128 + signal.SIGKILL  # 137
    TERMINATED = 128 + signal.SIGTERM  # 143


class JobFailed(Exception):
    """The job failed; ``reason`` goes to the failure file, ``errno`` is the exit code.

    The toolkit's ``train`` exits with an exception's ``errno`` and writes its
    own failure file only when none exists, so raising this keeps our reason.
    """

    def __init__(self, reason: str, exit_code: int) -> None:
        super().__init__(reason)
        self.reason = reason
        self.errno = int(exit_code)


def describe_exit(returncode: int) -> tuple[int, str]:
    """Turn a child's ``Popen.returncode`` into ``(exit code, plain-words reason)``."""
    if returncode >= 0:
        return returncode, f"exited with code {returncode}"
    signum = -returncode
    try:
        name = signal.Signals(signum).name
    except ValueError:
        name = f"signal {signum}"
    reason = f"killed by signal {signum} ({name})"
    if signum == signal.SIGKILL:
        reason += (
            ", probably out of memory: the kernel's OOM killer sends SIGKILL. Use an "
            "instance with more memory, or lower the batch size or sequence length"
        )
    return 128 + signum, reason


def torchrun_root_cause(stderr_tail: str) -> tuple[int, int] | None:
    """``(rank, returncode)`` of the first failed worker in torchrun's error summary.

    torchrun exits 1 whatever happened to a worker, so a worker killed by the
    OOM killer would otherwise look like an ordinary script error.
    """
    found = _ROOT_CAUSE.search(stderr_tail)
    return (int(found.group(1)), int(found.group(2))) if found else None


def write_failure(output_dir: Path, reason: str) -> Path:
    """Write ``<output_dir>/failure`` once; a later call keeps the first reason."""
    path = Path(output_dir) / "failure"
    path.parent.mkdir(parents=True, exist_ok=True)
    text = reason.strip()
    if len(text) > _FAILURE_FILE_CHARS:
        text = text[:_FAILURE_FILE_CHARS] + "\n[truncated]"
    try:
        with path.open("x") as handle:
            handle.write(text + "\n")
    except FileExistsError:
        pass
    return path
