"""Docker local mode around SageMaker's own (``instance_type="local"`` / ``"local_gpu"``).

SageMaker's local mode runs the job with docker compose. On its own it fails
in ways a person cannot act on: a missing or stopped engine shows up as a
traceback from deep in the SDK, a missing image as a registry pull error, and
a failing script as ``Failed to run: docker-compose ... exited with code 1``.
Containers run as root, so files they write in the user's directories stay
root-owned, and an interrupted ``fit()`` can leave containers running.

The estimators wrap the SDK's ``fit()`` in :func:`docker_job`, which

1. calls :func:`preflight` (engine, compose, image) before anything starts,
   and mounts a ``file://`` ``checkpoint_s3_uri`` at the job's checkpoint path
   (:mod:`trcomp.local.checkpoints`), so checkpoints and compile caches outlive
   the container;
2. labels the job's containers and gives them a large ``/dev/shm``
   (:func:`shm_size`; Docker's default of 64 MB breaks NCCL between GPUs and
   DataLoader workers), both through the session's ``local.container_config``,
   and keeps the SDK's scratch files in a directory of its own;
3. turns a failed run into a :class:`~trcomp.errors.LocalModeError` carrying
   the job's own failure reason (``/opt/ml/output/failure``, which local mode
   copies into ``output.tar.gz``);
4. stops and removes the job's containers on the way out, Ctrl-C included;
5. hands back files left root-owned in the user's directories.

Inside trcomp's image the entrypoint (``container/entrypoint.sh``) already
gives files back to the owner of each mount; step 5 covers other images.
"""

from __future__ import annotations

import contextlib
import io
import logging
import os
import re
import shutil
import signal
import sys
import tarfile
import tempfile
import threading
import time
import uuid
from collections import deque
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any, TextIO

from trcomp._sdk_compat import current_job_name
from trcomp.errors import LocalModeError
from trcomp.local import local_path
from trcomp.local.checkpoints import checkpoint_mount
from trcomp.local.docker_checks import compose_command, preflight, run_docker

__all__ = [
    "JOB_LABEL",
    "compose_command",
    "docker_job",
    "failure_reason",
    "preflight",
    "shm_size",
]

logger = logging.getLogger(__name__)

JOB_LABEL = "com.trcomp.local-job"
"""Docker label on every container of a local-mode job; its value identifies the job."""

_ANSI = re.compile(r"\x1b\[[0-9;]*m")


# -- reading the failure reason -----------------------------------------------------


def failure_reason(output_tar: str | os.PathLike[str]) -> str | None:
    """The job's failure reason from an ``output.tar.gz`` (its ``failure`` member), if any."""
    try:
        with tarfile.open(output_tar) as tar:
            for member in tar.getmembers():
                if member.isfile() and member.name.lstrip("./") == "failure":
                    handle = tar.extractfile(member)
                    text = handle.read().decode(errors="replace").strip() if handle else ""
                    return text or None
    except (OSError, tarfile.TarError):
        return None
    return None


def _output_tars(estimator: Any, scratch: Path, since: float) -> list[Path]:
    """Where local mode put this job's ``output.tar.gz``: the file:// output_path or scratch."""
    candidates = list(scratch.glob("*/compressed_artifacts/output.tar.gz"))
    output_dir = _file_output_path(estimator)
    if output_dir is not None:
        candidates.append(output_dir / "output.tar.gz")
    # A stale output.tar.gz from an earlier job at the same path is not this job's.
    fresh = [p for p in candidates if p.is_file() and p.stat().st_mtime >= since - 1]
    return sorted(fresh, key=lambda p: p.stat().st_mtime, reverse=True)


class _Tail(io.TextIOBase):
    """A stdout that passes everything through and keeps the last lines (local mode's log)."""

    def __init__(self, inner: TextIO, lines: int = 25) -> None:
        self.inner = inner
        self.lines: deque[str] = deque(maxlen=lines)
        self._partial = ""

    def write(self, text: str) -> int:
        self.inner.write(text)
        self._partial += text
        *done, self._partial = self._partial.split("\n")
        self.lines.extend(_ANSI.sub("", line) for line in done if line.strip())
        return len(text)

    def flush(self) -> None:
        self.inner.flush()

    def fileno(self) -> int:
        return self.inner.fileno()

    def isatty(self) -> bool:
        return self.inner.isatty()


def _job_failed(
    exc: RuntimeError, estimator: Any, scratch: Path, since: float, tail: _Tail
) -> LocalModeError:
    name = current_job_name(estimator) or "local training job"
    code = re.search(r"exited with code:? (\d+)", str(exc))
    tars = _output_tars(estimator, scratch, since)
    reason = next((r for r in map(failure_reason, tars) if r), None)
    if reason is None:
        shown = "\n".join(f"  {line}" for line in list(tail.lines)[-10:])
        reason = "the job wrote no failure reason; the end of its log:\n" + shown
    notes = ["the full log is above"]
    if tars:
        notes.append(f"the job's output: {tars[0]}")
    if code:
        notes.append(f"docker compose exit code {code.group(1)}")
    return LocalModeError(f"{name} failed in local mode: {reason.rstrip()}\n({'; '.join(notes)})")


# -- containers and files -----------------------------------------------------------


def _job_containers(job_id: str) -> list[str]:
    found = run_docker(["docker", "ps", "-aq", "--filter", f"label={JOB_LABEL}={job_id}"])
    return found.stdout.split() if found.returncode == 0 else []


def _stop_containers(job_id: str) -> list[str]:
    """Stop every container of the job (SIGTERM, SIGKILL after 10 s); return their ids."""
    ids = _job_containers(job_id)
    if ids:
        run_docker(["docker", "stop", "--time", "10", *ids], timeout=60)
    return ids


def _remove_containers(job_id: str) -> None:
    """Stop and remove every container of the job."""
    ids = _stop_containers(job_id)
    if ids:
        run_docker(["docker", "rm", "--force", *ids], timeout=60)


class _CtrlC:
    """Ctrl-C during the job stops its containers, and ``fit()`` raises KeyboardInterrupt.

    Needed because the SDK cannot do it: its telemetry wrapper around the local
    client returns from a ``finally`` block, which swallows KeyboardInterrupt,
    so ``fit()`` would return as if the job had succeeded while compose and the
    containers went on. A second Ctrl-C acts as usual.
    """

    def __init__(self, job_id: str) -> None:
        self.job_id = job_id
        self.pressed = False
        self._previous: Any = None
        self._stopper: threading.Thread | None = None

    def __enter__(self) -> _CtrlC:
        if threading.current_thread() is threading.main_thread():
            previous = signal.getsignal(signal.SIGINT)
            if previous not in (signal.SIG_IGN, None):
                self._previous = previous
                signal.signal(signal.SIGINT, self._on_sigint)
        return self

    def _on_sigint(self, signum: int, frame: Any) -> None:
        self.pressed = True
        signal.signal(signal.SIGINT, self._previous)
        print("\n[trcomp] Ctrl-C: stopping the job's containers", file=sys.stderr, flush=True)
        # Off the main thread, which must keep draining compose's output meanwhile.
        self._stopper = threading.Thread(target=_stop_containers, args=(self.job_id,), daemon=True)
        self._stopper.start()

    def __exit__(self, *exc: object) -> None:
        if self._previous is not None:
            signal.signal(signal.SIGINT, self._previous)
        if self._stopper is not None:
            self._stopper.join(timeout=60)


def _any_root_owned(paths: Iterable[Path]) -> bool:
    for top in paths:
        for dirpath, dirnames, filenames in os.walk(top):
            for name in (*dirnames, *filenames):
                with contextlib.suppress(OSError):
                    if Path(dirpath, name).lstat().st_uid == 0:
                        return True
    return False


def _give_back(paths: list[Path], image_uri: str) -> None:
    """Chown root-owned files under ``paths`` to the caller, from a throwaway container."""
    uid, gid = os.getuid(), os.getgid()
    if uid == 0 or not _any_root_owned(paths):
        return
    mounts = [arg for p in paths for arg in ("-v", f"{p}:{p}")]
    cmd = [
        "docker",
        "run",
        "--rm",
        "--network",
        "none",
        "--user",
        "0",
        "--entrypoint",
        "find",
        *mounts,
        image_uri,
        *map(str, paths),
        "-user",
        "0",
        "-exec",
        "chown",
        "-h",
        f"{uid}:{gid}",
        "{}",
        "+",
    ]
    if run_docker(cmd, timeout=120).returncode != 0 or _any_root_owned(paths):
        logger.warning(
            "files written as root by the job are left under %s; remove them with sudo",
            ", ".join(map(str, paths)),
        )


def _file_output_path(estimator: Any) -> Path | None:
    """The host directory of a ``file://`` output_path (None for S3 or no output_path)."""
    output_path = getattr(estimator, "output_path", None) or ""
    return local_path(output_path) if output_path.startswith("file://") else None


def _user_dirs(estimator: Any, scratch: Path) -> list[Path]:
    """The host dirs the job may write to, except data channels (possibly huge datasets).

    trcomp's image fixes ownership in channels itself (container/entrypoint.sh).
    """
    dirs = [scratch]
    source_dir = getattr(estimator, "source_dir", None)
    if source_dir and "://" not in str(source_dir):
        dirs.append(Path(source_dir).resolve())
    output_dir = _file_output_path(estimator)
    if output_dir is not None:
        dirs.append(output_dir)
    return [d for d in dirs if d.is_dir()]


# -- the wrapper --------------------------------------------------------------------


def shm_size(memory_bytes: int | None = None) -> str:
    """``shm_size`` for local-mode containers: half the host's memory (a limit, not a reservation).

    /dev/shm is a tmpfs: it takes memory only for what is written there.
    """
    if memory_bytes is None:
        memory_bytes = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    return f"{max(1, memory_bytes // 2 // 2**30)}g"


@contextlib.contextmanager
def _local_config(session: Any, scratch: Path, job_id: str) -> Iterator[None]:
    """Point the session's local-mode settings at our scratch dir and label, then restore."""
    before = session.config
    config = dict(before or {})
    local = dict(config.get("local") or {})
    local["container_root"] = str(scratch)
    container_config = dict(local.get("container_config") or {})
    labels = dict(container_config.get("labels") or {})
    labels[JOB_LABEL] = job_id
    container_config["labels"] = labels
    container_config.setdefault("shm_size", shm_size())  # a size the user set wins
    local["container_config"] = container_config
    config["local"] = local
    session.config = config
    try:
        yield
    finally:
        session.config = before


@contextlib.contextmanager
def docker_job(estimator: Any) -> Iterator[None]:
    """Run ``estimator``'s SageMaker local-mode ``fit()`` inside this block.

    Use as ``with docker_job(self): super().fit(...)``. Raises
    :class:`~trcomp.errors.LocalModeError` before the job when it cannot start,
    and instead of the SDK's compose error when the job fails.
    """
    image_uri = estimator.training_image_uri()
    # Refuses an S3 checkpoint URI, which local mode cannot sync, before the engine checks.
    with checkpoint_mount(estimator) as checkpoints:
        preflight(image_uri, estimator.instance_type)
        with _compose_job(estimator, image_uri) as dirs:
            if checkpoints is not None:
                dirs.append(checkpoints)
            yield


@contextlib.contextmanager
def _compose_job(estimator: Any, image_uri: str) -> Iterator[list[Path]]:
    """Run the SDK's job; yields a list of extra dirs whose ownership to hand back."""
    extra_dirs: list[Path] = []
    job_id = uuid.uuid4().hex[:12]
    session = estimator.sagemaker_session
    user_root = (session.config or {}).get("local", {}).get("container_root")
    scratch = Path(tempfile.mkdtemp(prefix="trcomp-local-", dir=user_root)).resolve()
    since = time.time()
    tail = _Tail(sys.stdout)
    keep_scratch = False
    ctrl_c = _CtrlC(job_id)
    try:
        with _local_config(session, scratch, job_id), contextlib.redirect_stdout(tail), ctrl_c:
            try:
                yield extra_dirs
            except RuntimeError as exc:
                if ctrl_c.pressed:
                    raise KeyboardInterrupt from None
                if "Failed to run" not in str(exc):
                    raise
                keep_scratch = not getattr(estimator, "output_path", None)
                raise _job_failed(exc, estimator, scratch, since, tail) from exc
        if ctrl_c.pressed:
            raise KeyboardInterrupt
        # No output_path: the SDK left the artifacts in its scratch dir, which is now ours.
        keep_scratch = not getattr(estimator, "output_path", None)
    finally:
        # Compose leaves stopped containers behind, and running ones after Ctrl-C.
        _remove_containers(job_id)
        _give_back(_user_dirs(estimator, scratch) + extra_dirs, image_uri)
        if keep_scratch:
            logger.warning("local-mode artifacts are in %s", scratch)
        else:
            shutil.rmtree(scratch, ignore_errors=True)
