"""Docker local mode around SageMaker's own (``instance_type="local"`` / ``"local_gpu"``).

SageMaker's local mode runs the job with docker compose. On its own it fails
in ways a person cannot act on: a missing or stopped engine shows up as a
traceback from deep in the SDK, a missing image as a registry pull error, and
a failing script as ``Failed to run: docker-compose ... exited with code 1``.
Containers run as root, so files they write in the user's directories stay
root-owned, and an interrupted ``fit()`` can leave containers running.

The estimators wrap the SDK's ``fit()`` in :func:`docker_job`, which

1. checks the job's spec (:mod:`trcomp.local.job_checks`) and calls
   :func:`preflight` (engine, compose, image) before anything is created, and
   mounts a ``file://`` ``checkpoint_s3_uri`` at the job's checkpoint path
   (:mod:`trcomp.local.checkpoints`), so checkpoints and compile caches outlive
   the container;
2. writes the artifacts of a ``file://`` output_path to
   ``<output_path>/<job name>/output/``, a folder of the job's own;
   what the SDK's ``fit()`` must read for this job (that folder, no S3
   checkpoint settings, the extra environment) comes back as a
   :class:`~trcomp.jobspec.SdkView`, and the estimator's own attributes are
   left as they are;
3. labels the job's containers and gives them a large ``/dev/shm``
   (:func:`shm_size`; Docker's default of 64 MB breaks NCCL between GPUs and
   DataLoader workers), both through the session's ``local.container_config``,
   and keeps the SDK's scratch files in a directory of its own;
4. turns a failed run into a :class:`~trcomp.contract.errors.LocalJobFailed` carrying
   the job's own failure reason (``/opt/ml/output/failure``, which local mode
   copies into ``output.tar.gz``) and exit code;
5. stops and removes the job's containers on the way out: on Ctrl-C and
   SIGTERM with a grace period, when ``fit()`` dies through a watcher
   (:mod:`trcomp.local.docker_stop`);
6. hands back files left root-owned in the user's directories.

Inside trcomp's image the entrypoint (``container/entrypoint.sh``) already
gives files back to the owner of each mount; step 6 covers other images.
"""

from __future__ import annotations

import contextlib
import io
import json
import logging
import os
import re
import shutil
import signal
import sys
import tarfile
import tempfile
import time
import uuid
from collections import deque
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any, TextIO

from trcomp._sdk_compat import new_job_name
from trcomp.checkpoints import checkpoint_environment
from trcomp.contract.env import GIVE_BACK_INPUTS_ENV
from trcomp.contract.errors import JobInterrupted, JobTerminated, LocalJobFailed
from trcomp.contract.proctree import outer_grace_s
from trcomp.docker_cli import compose_command, run_docker
from trcomp.jobspec import JobSpec, SdkView
from trcomp.local import local_path
from trcomp.local.checkpoints import checkpoint_mount
from trcomp.local.docker_checks import preflight
from trcomp.local.docker_stop import JOB_LABEL, remove_containers, stop_on_signals, watch
from trcomp.local.job_checks import LocalJobChecks, check_local_job, claim_job_dir
from trcomp.shared_cache_checks import check_shared_cache

if TYPE_CHECKING:
    from sagemaker.estimator import EstimatorBase

__all__ = [
    "JOB_LABEL",
    "compose_command",
    "docker_job",
    "docker_view",
    "failure_reason",
    "preflight",
    "shm_size",
]

logger = logging.getLogger(__name__)

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


def _output_tars(output_path: Any, scratch: Path, since: float) -> list[Path]:
    """Where local mode put this job's ``output.tar.gz``: the file:// output_path or scratch."""
    candidates = list(scratch.glob("*/compressed_artifacts/output.tar.gz"))
    output_dir = _file_output_path(output_path)
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


def _exit_code(output_tar: Path) -> int | None:
    """The job's exit code from the ``summary.json`` in its ``output.tar.gz``, if any."""
    try:
        with tarfile.open(output_tar) as tar:
            for member in tar.getmembers():
                if member.isfile() and member.name.endswith("compiler/summary.json"):
                    handle = tar.extractfile(member)
                    code = json.load(handle).get("exit_code") if handle else None
                    return int(code) if code is not None else None
    except (OSError, tarfile.TarError, ValueError, TypeError):
        return None
    return None


def _job_failed(
    exc: RuntimeError, name: str, output_path: Any, scratch: Path, since: float, tail: _Tail
) -> LocalJobFailed:
    compose_code = re.search(r"exited with code:? (\d+)", str(exc))
    tars = _output_tars(output_path, scratch, since)
    reason = next((r for r in map(failure_reason, tars) if r), None)
    exit_code = next((c for c in map(_exit_code, tars) if c is not None), None)
    if reason is None:
        shown = "\n".join(f"  {line}" for line in list(tail.lines)[-10:])
        reason = "the job wrote no failure reason; the end of its log:\n" + shown
    notes = [f"exit code {exit_code}" if exit_code is not None else "exit code unknown"]
    notes.append("the full log is above")
    if tars:
        notes.append(f"the job's output: {tars[0]}")
    if compose_code:
        notes.append(f"docker compose exit code {compose_code.group(1)}")
    return LocalJobFailed(
        f"{name} failed in local mode: {reason.rstrip()}\n({'; '.join(notes)})", exit_code
    )


# -- containers and files -----------------------------------------------------------


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
    args = [
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
    if run_docker(args, timeout=120).returncode != 0 or _any_root_owned(paths):
        logger.warning(
            "files written as root by the job are left under %s; remove them with sudo",
            ", ".join(map(str, paths)),
        )


def _file_output_path(output_path: Any) -> Path | None:
    """The host directory of a ``file://`` output_path (None for S3 or no output_path)."""
    text = str(output_path or "")
    return local_path(text) if text.startswith("file://") else None


def _user_dirs(spec: JobSpec, output_path: Any, scratch: Path) -> list[Path]:
    """The host dirs the job may write to, except data channels (possibly huge datasets).

    trcomp's image fixes ownership in channels itself (container/entrypoint.sh,
    asked to by ``TRCOMP_GIVE_BACK_INPUTS``).
    """
    dirs = [scratch]
    source_dir = spec.source_dir
    if source_dir and "://" not in str(source_dir):
        dirs.append(Path(str(source_dir)).resolve())
    output_dir = _file_output_path(output_path)
    if output_dir is not None:
        dirs.append(output_dir)
    return [d for d in dirs if d.is_dir()]


# -- the wrapper --------------------------------------------------------------------


"""For a local job only: trcomp's image also gives back files in the code dir and channels.

Here they are the user's own directories; on SageMaker the image leaves
channels alone (a channel may be a huge shared file system).
"""


def shm_size(memory_bytes: int | None = None) -> str:
    """``shm_size`` for local-mode containers: half the host's memory (a limit, not a reservation).

    /dev/shm is a tmpfs: it takes memory only for what is written there.
    """
    if memory_bytes is None:
        memory_bytes = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    return f"{max(1, memory_bytes // 2 // 2**30)}g"


@contextlib.contextmanager
def _local_config(session: Any, scratch: Path, job_id: str, grace: float) -> Iterator[None]:
    """Point the session's local-mode settings at our scratch dir and label, then restore.

    ``stop_grace_period`` is what compose gives the containers when it stops
    them itself (Ctrl-C at a terminal reaches compose too): the job's outer grace.
    """
    before = session.config
    config = dict(before or {})
    local = dict(config.get("local") or {})
    local["container_root"] = str(scratch)
    container_config = dict(local.get("container_config") or {})
    labels = dict(container_config.get("labels") or {})
    labels[JOB_LABEL] = job_id
    container_config["labels"] = labels
    container_config.setdefault("shm_size", shm_size())  # a size the user set wins
    container_config["stop_grace_period"] = f"{int(grace)}s"
    local["container_config"] = container_config
    config["local"] = local
    session.config = config
    try:
        yield
    finally:
        session.config = before


@contextlib.contextmanager
def docker_job(
    spec: JobSpec, estimator: EstimatorBase, inputs: Any = None, job_name: str | None = None
) -> Iterator[tuple[str, SdkView]]:
    """Run ``estimator``'s SageMaker local-mode ``fit()`` inside this block.

    Use as ``with docker_job(spec, self, inputs, job_name) as (name, view): ...
    super().fit(..., job_name=name)`` with the SDK reading ``view`` (the job's
    output folder, no S3 checkpoint settings, the extra environment). Raises
    :class:`~trcomp.contract.errors.LocalModeError` before the job when it cannot start,
    :class:`~trcomp.contract.errors.LocalJobFailed` instead of the SDK's compose error
    when the job fails, and :class:`~trcomp.contract.errors.JobInterrupted` (Ctrl-C) or
    :class:`~trcomp.contract.errors.JobTerminated` (SIGTERM) once a stopped job's
    containers are gone.
    """

    def new_name() -> str:
        return new_job_name(estimator)

    checks = check_local_job(spec, inputs, job_name, local_only=False, new_name=new_name)
    check_shared_cache(
        spec.compiler_config,
        mode="docker",
        environment=spec.environment,
        hyperparameters=estimator.hyperparameters(),
    )
    image_uri = estimator.training_image_uri()
    # Refuses an S3 checkpoint URI, which local mode cannot sync, before the engine checks.
    with checkpoint_mount(spec) as checkpoints:
        preflight(image_uri, spec.instance_type)
        name, output_path = _job_output(spec, checks, new_name)
        with _compose_job(spec, estimator, image_uri, name, output_path) as dirs:
            if checkpoints is not None:
                dirs.append(checkpoints)
            yield name, docker_view(spec, checkpoints, output_path)


def docker_view(spec: JobSpec, checkpoints: Path | None, output_path: Any) -> SdkView:
    """What the SDK's local-mode ``fit()`` reads for one job.

    No checkpoint settings (local mode refuses them; ``checkpoints``, the host dir,
    is mounted instead), the job's own ``output_path``, and the environment that
    gives files back and tells the container where its checkpoints are (summary.json
    names the cache where the user keeps it).
    """
    environment = {GIVE_BACK_INPUTS_ENV: "1"}
    if checkpoints is not None:
        environment.update(checkpoint_environment(spec.checkpoint_local_path, checkpoints))
    return SdkView(
        checkpoint_s3_uri=None,
        checkpoint_local_path=None,
        output_path=output_path,
        extra_environment=environment,
    )


def _job_output(
    spec: JobSpec, checks: LocalJobChecks, new_name: Callable[[], str]
) -> tuple[str, Any]:
    """The job's name and output_path: ``<output_path>/<job name>/output`` for ``file://``.

    As SageMaker does remotely; the SDK's local mode would write every job's
    ``model.tar.gz`` straight into output_path, over the previous one.
    """
    if checks.output_root is None:
        return checks.name, spec.output_path
    name, folder = claim_job_dir(
        checks.output_root, checks.name, renamable=not checks.name_given, new_name=new_name
    )
    return name, f"file://{folder / 'output'}"


@contextlib.contextmanager
def _compose_job(
    spec: JobSpec, estimator: EstimatorBase, image_uri: str, name: str, output_path: Any
) -> Iterator[list[Path]]:
    """Run the SDK's job; yields a list of extra dirs whose ownership to hand back."""
    extra_dirs: list[Path] = []
    job_id = uuid.uuid4().hex[:12]
    session = estimator.sagemaker_session
    user_root = (session.config or {}).get("local", {}).get("container_root")
    scratch = Path(tempfile.mkdtemp(prefix="trcomp-local-", dir=user_root)).resolve()
    since = time.time()
    tail = _Tail(sys.stdout)
    keep_scratch = False
    grace = outer_grace_s({str(k): str(v) for k, v in spec.environment.items()})
    stopper = stop_on_signals(job_id, name, grace)
    try:
        with (
            _local_config(session, scratch, job_id, grace),
            contextlib.redirect_stdout(tail),
            watch(job_id, grace),
            stopper,
        ):
            try:
                yield extra_dirs
            except RuntimeError as exc:
                if "Failed to run" not in str(exc) or stopper.received is not None:
                    raise
                keep_scratch = not output_path
                raise _job_failed(exc, name, output_path, scratch, since, tail) from exc
            finally:
                if stopper.received is not None:
                    _raise_stopped(output_path, stopper.received, name, scratch, since)
        # No output_path: the SDK left the artifacts in its scratch dir, which is now ours.
        keep_scratch = not output_path
    finally:
        # Compose leaves stopped containers behind, and running ones after Ctrl-C.
        remove_containers(job_id, grace)
        _give_back(_user_dirs(spec, output_path, scratch) + extra_dirs, image_uri)
        if keep_scratch:
            logger.warning("local-mode artifacts are in %s", scratch)
        else:
            shutil.rmtree(scratch, ignore_errors=True)


def _raise_stopped(output_path: Any, signum: int, name: str, scratch: Path, since: float) -> None:
    tars = _output_tars(output_path, scratch, since)
    exit_code = next((c for c in map(_exit_code, tars) if c is not None), None)
    where = f"what it saved is in {tars[0].parent}" if tars else "it packed nothing"
    message = (
        f"job {name} was stopped by {signal.Signals(signum).name} (exit code "
        f"{exit_code if exit_code is not None else 'unknown'}); {where}"
    )
    if signum == signal.SIGINT:
        raise JobInterrupted(message, exit_code) from None
    print(f"[trcomp] {message}", file=sys.stderr, flush=True)
    raise JobTerminated(message, exit_code, signum) from None
