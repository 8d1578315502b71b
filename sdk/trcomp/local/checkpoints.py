"""Checkpoints in Docker local mode: ``checkpoint_s3_uri="file:///dir"`` is mounted.

On SageMaker the platform syncs ``checkpoint_local_path`` (``/opt/ml/checkpoints``)
with ``checkpoint_s3_uri``. SageMaker's local mode refuses both settings
("not supported in local mode"), so checkpoints, and the compile caches trcomp
keeps under ``/opt/ml/checkpoints/trcomp-cache``, would die with the container.
For a ``file://`` URI, :func:`checkpoint_mount` bind-mounts that directory at
the checkpoint path of every container of the job, as process mode links it:
a second job starts from the first one's checkpoints and warm compile caches.

The SDK has no public way to add a volume; :func:`trcomp._sdk_compat.extra_training_volume`
adds the mount to the containers of the ``fit()`` that opened it (two ``fit()``
calls in two threads each get their own), and the Docker run mode hands the SDK
neither setting (:class:`~trcomp.jobspec.SdkView`).
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Iterator
from pathlib import Path
from urllib.parse import urlparse

from trcomp._sdk_compat import extra_training_volume
from trcomp.contract.errors import LocalModeError
from trcomp.jobspec import JobSpec
from trcomp.local import local_path

__all__ = ["DEFAULT_CHECKPOINT_PATH", "checkpoint_dir", "checkpoint_mount"]

logger = logging.getLogger(__name__)

DEFAULT_CHECKPOINT_PATH = "/opt/ml/checkpoints"


def checkpoint_dir(spec: JobSpec) -> Path | None:
    """The host directory of a ``file://`` ``checkpoint_s3_uri``, or None."""
    uri = spec.checkpoint_s3_uri
    if not uri or urlparse(str(uri)).scheme != "file":
        return None
    return local_path(str(uri))


@contextlib.contextmanager
def checkpoint_mount(spec: JobSpec) -> Iterator[Path | None]:
    """Mount a ``file://`` checkpoint dir into the job's containers inside this block.

    Yields the host directory (None when the job keeps no checkpoints). Raises
    :class:`~trcomp.contract.errors.LocalModeError` before the job for an S3 URI, which
    local mode cannot sync.
    """
    uri = spec.checkpoint_s3_uri
    container_path = spec.checkpoint_local_path
    host_dir = checkpoint_dir(spec)
    if host_dir is None and uri:
        raise LocalModeError(
            f"checkpoint_s3_uri is {uri!r}, but SageMaker's local mode does not sync "
            "checkpoints with S3. Pass checkpoint_s3_uri='file:///some/dir' to keep "
            "checkpoints and compile caches on this machine, or leave it unset."
        )
    if host_dir is None:
        if container_path:
            raise LocalModeError(
                f"checkpoint_local_path={container_path!r} needs checkpoint_s3_uri in Docker "
                "local mode: pass checkpoint_s3_uri='file:///some/dir' as well"
            )
        yield None
        return
    mount_point = str(container_path or DEFAULT_CHECKPOINT_PATH)
    if not mount_point.startswith("/"):
        raise LocalModeError(
            f"checkpoint_local_path is {mount_point!r}: it must be an absolute path "
            f"inside the container (the default is {DEFAULT_CHECKPOINT_PATH})"
        )
    host_dir.mkdir(parents=True, exist_ok=True)
    with extra_training_volume(str(host_dir), mount_point):
        logger.info("checkpoints: %s mounted at %s", host_dir, mount_point)
        yield host_dir
