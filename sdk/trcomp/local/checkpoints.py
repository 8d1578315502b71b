"""Checkpoints in Docker local mode: ``checkpoint_s3_uri="file:///dir"`` is mounted.

On SageMaker the platform syncs ``checkpoint_local_path`` (``/opt/ml/checkpoints``)
with ``checkpoint_s3_uri``. SageMaker's local mode refuses both settings
("not supported in local mode"), so checkpoints, and the compile caches trcomp
keeps under ``/opt/ml/checkpoints/trcomp-cache``, would die with the container.
For a ``file://`` URI, :func:`checkpoint_mount` bind-mounts that directory at
the checkpoint path of every container of the job, as process mode links it:
a second job starts from the first one's checkpoints and warm compile caches.

The SDK has no public way to add a volume; :func:`trcomp._sdk_compat.extra_training_volume`
adds the mount, and the two settings are hidden from the SDK, for the duration
of one ``fit()``.
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from urllib.parse import urlparse

from trcomp._sdk_compat import extra_training_volume
from trcomp.checkpoints import export_checkpoint_path
from trcomp.contract.errors import LocalModeError
from trcomp.contract.keys import CHECKPOINT_URI_ENV
from trcomp.local import local_path

__all__ = ["DEFAULT_CHECKPOINT_PATH", "checkpoint_dir", "checkpoint_mount"]

logger = logging.getLogger(__name__)

DEFAULT_CHECKPOINT_PATH = "/opt/ml/checkpoints"


def checkpoint_dir(estimator: Any) -> Path | None:
    """The host directory of a ``file://`` ``checkpoint_s3_uri``, or None."""
    uri = getattr(estimator, "checkpoint_s3_uri", None)
    if not uri or urlparse(str(uri)).scheme != "file":
        return None
    return local_path(str(uri))


@contextlib.contextmanager
def checkpoint_mount(estimator: Any) -> Iterator[Path | None]:
    """Mount a ``file://`` checkpoint dir into the job's containers inside this block.

    Raises :class:`~trcomp.contract.errors.LocalModeError` before the job for an S3 URI,
    which local mode cannot sync.
    """
    uri = getattr(estimator, "checkpoint_s3_uri", None)
    local_path = getattr(estimator, "checkpoint_local_path", None)
    host_dir = checkpoint_dir(estimator)
    if host_dir is None and uri:
        raise LocalModeError(
            f"checkpoint_s3_uri is {uri!r}, but SageMaker's local mode does not sync "
            "checkpoints with S3. Pass checkpoint_s3_uri='file:///some/dir' to keep "
            "checkpoints and compile caches on this machine, or leave it unset."
        )
    if host_dir is None:
        if local_path:
            raise LocalModeError(
                f"checkpoint_local_path={local_path!r} needs checkpoint_s3_uri in Docker "
                "local mode: pass checkpoint_s3_uri='file:///some/dir' as well"
            )
        yield None
        return
    container_path = str(local_path or DEFAULT_CHECKPOINT_PATH)
    if not container_path.startswith("/"):
        raise LocalModeError(
            f"checkpoint_local_path is {container_path!r}: it must be an absolute path "
            f"inside the container (the default is {DEFAULT_CHECKPOINT_PATH})"
        )
    host_dir.mkdir(parents=True, exist_ok=True)
    export_checkpoint_path(estimator)  # before the SDK stops seeing checkpoint_local_path
    # For this job only: summary.json names the cache where the user keeps it.
    environment = getattr(estimator, "environment", None)
    estimator.environment = {**(environment or {}), CHECKPOINT_URI_ENV: host_dir.as_uri()}
    with extra_training_volume(str(host_dir), container_path):
        estimator.checkpoint_s3_uri = estimator.checkpoint_local_path = None
        logger.info("checkpoints: %s mounted at %s", host_dir, container_path)
        try:
            yield host_dir
        finally:
            estimator.checkpoint_s3_uri, estimator.checkpoint_local_path = uri, local_path
            estimator.environment = environment
