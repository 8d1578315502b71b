"""Tell the container where the job's checkpoint directory is.

SageMaker syncs ``checkpoint_local_path`` (default ``/opt/ml/checkpoints``) with
``checkpoint_s3_uri``. The container keeps its compile caches under the
checkpoint directory, so when a user picks another ``checkpoint_local_path``
the caches must follow it, or they are never synced and every job compiles
cold. The estimators pass the path as ``TRCOMP_CHECKPOINT_DIR`` in the job's
environment; the entrypoint reads it (``trcomp_container.job``).
"""

from __future__ import annotations

import re
from pathlib import PurePosixPath
from typing import Any

from trcomp.contract.keys import CHECKPOINT_DIR_ENV

__all__ = [
    "CHECKPOINT_PREFIX",
    "default_checkpoint_location",
    "export_checkpoint_path",
]

CHECKPOINT_PREFIX = "trcomp-checkpoints"
"""Key prefix, in the session's default bucket, of the default checkpoint locations."""


def export_checkpoint_path(estimator: Any) -> None:
    """Add ``TRCOMP_CHECKPOINT_DIR`` to the job's environment when the user set a path.

    Nothing changes when ``checkpoint_local_path`` is unset: the container then
    uses SageMaker's default, ``/opt/ml/checkpoints``.
    """
    path = getattr(estimator, "checkpoint_local_path", None)
    if not path:
        return
    estimator.environment = {
        **(getattr(estimator, "environment", None) or {}),
        CHECKPOINT_DIR_ENV: str(path),
    }


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
