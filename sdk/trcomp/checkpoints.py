"""Tell the container where the job's checkpoint directory is.

SageMaker syncs ``checkpoint_local_path`` (default ``/opt/ml/checkpoints``) with
``checkpoint_s3_uri``. The container keeps its compile caches under the
checkpoint directory, so when a user picks another ``checkpoint_local_path``
the caches must follow it, or they are never synced and every job compiles
cold. Every run mode (SageMaker, Docker local mode, process mode, and v3's
ModelTrainer) adds :func:`checkpoint_environment` to the job's environment: the
path as ``TRCOMP_CHECKPOINT_DIR`` (read by ``trcomp_container.job``) and, for a
checkpoint directory on this machine, its ``file://`` URI as ``TRCOMP_CHECKPOINT_URI``.
"""

from __future__ import annotations

import re
from pathlib import Path, PurePosixPath
from typing import Any

from trcomp.contract.keys import CHECKPOINT_DIR_ENV, CHECKPOINT_URI_ENV

__all__ = [
    "CHECKPOINT_PREFIX",
    "checkpoint_environment",
    "default_checkpoint_location",
]

CHECKPOINT_PREFIX = "trcomp-checkpoints"
"""Key prefix, in the session's default bucket, of the default checkpoint locations."""


def checkpoint_environment(container_dir: Any, host_dir: Path | None = None) -> dict[str, str]:
    """The variables that tell the job's container where its checkpoints are.

    ``container_dir`` is the user's ``checkpoint_local_path`` (None: the container
    uses SageMaker's default, ``/opt/ml/checkpoints``, and no variable is set);
    ``host_dir`` is the checkpoint directory on this machine, for local jobs.
    """
    environment: dict[str, str] = {}
    if container_dir:
        environment[CHECKPOINT_DIR_ENV] = str(container_dir)
    if host_dir is not None:
        environment[CHECKPOINT_URI_ENV] = host_dir.as_uri()
    return environment


def _key_part(text: str) -> str:
    cleaned = re.sub(r"[^A-Za-z0-9._-]+", "-", text).strip("-.")
    return cleaned or "job"


def default_checkpoint_location(
    bucket: str, bucket_prefix: str | None, base_job_name: str | None, entry_point: str | None
) -> str:
    """``s3://<bucket>/[<prefix>/]trcomp-checkpoints/[<base_job_name>/]<entry point stem>/``.

    Stable across jobs of the same script, so the next job starts with a warm
    compile cache. Pure: the caller looks the default bucket up.
    """
    stem = PurePosixPath(str(entry_point)).stem if entry_point else None
    parts = [_key_part(p) for p in (base_job_name, stem) if p] or ["job"]
    keys = [k.strip("/") for k in (bucket, bucket_prefix or "", CHECKPOINT_PREFIX, *parts)]
    return "s3://" + "/".join(k for k in keys if k) + "/"
