"""Running jobs on this machine without SageMaker: the /opt/ml tree and process mode."""

from __future__ import annotations

from pathlib import Path
from urllib.parse import urlparse

__all__ = ["local_path"]


def local_path(uri: str) -> Path | None:
    """The absolute host path of a ``file://`` URI or a plain path; None for s3:// and others."""
    parsed = urlparse(uri)
    if parsed.scheme == "file":
        return Path(parsed.netloc + parsed.path).expanduser().resolve()
    if not parsed.scheme:
        return Path(uri).expanduser().resolve()
    return None
