"""Tell the container where the job's checkpoint directory is.

SageMaker syncs ``checkpoint_local_path`` (default ``/opt/ml/checkpoints``) with
``checkpoint_s3_uri``. The container keeps its compile caches under the
checkpoint directory, so when a user picks another ``checkpoint_local_path``
the caches must follow it, or they are never synced and every job compiles
cold. The estimators pass the path as ``TRCOMP_CHECKPOINT_DIR`` in the job's
environment; the entrypoint reads it (``trcomp_container.job``).
"""

from __future__ import annotations

from typing import Any

__all__ = ["CHECKPOINT_DIR_ENV", "CHECKPOINT_URI_ENV", "export_checkpoint_path"]

CHECKPOINT_DIR_ENV = "TRCOMP_CHECKPOINT_DIR"
"""Environment variable naming the job's checkpoint directory inside the container."""

CHECKPOINT_URI_ENV = "TRCOMP_CHECKPOINT_URI"
"""Environment variable with the user's checkpoint location (a local job's ``file://`` URI).

The container reports the compile cache there in summary.json, not at its own
mount point, which means nothing once the job is over.
"""


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
