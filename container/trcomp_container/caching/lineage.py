"""The compile caches live on local disk while the job runs, and persist in the checkpoint dir.

SageMaker uploads ``/opt/ml/checkpoints`` continuously. Compilers write
thousands of small files there, with transient temp files and lock dirs, and
the S3 prefix is downloaded again before every job. So the compilers write to a
local directory; :func:`restore` copies the persisted cache into it when the
job starts and :func:`persist` copies back what is new when it ends, without
temp files, locks or anything else that only matters to a running compiler.
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path, PurePath

__all__ = ["is_transient", "persist", "restore"]

# inductor: locks/ with *.lock files, ".<pid>.<tid>.tmp" files of atomic writes;
# triton: "tmp.pid_<pid>_<n>" dirs it renames into place; torch-xla: *.tmp.
_TRANSIENT_DIRS = frozenset({"locks", "lock", "__pycache__"})
_TRANSIENT_SUFFIXES = (".tmp", ".lock", ".lck", ".partial")


def is_transient(relative: PurePath) -> bool:
    """Whether a path under the cache is a compiler's temp or lock file (not worth keeping)."""
    for part in relative.parts:
        if part in _TRANSIENT_DIRS or part.startswith(("tmp.", "tmp_")):
            return True
        if part.endswith(_TRANSIENT_SUFFIXES):
            return True
    return False


def _copy_tree(source: Path, dest: Path) -> int:
    """Copy the files of ``source`` that ``dest`` lacks or holds with another size."""
    if not source.is_dir():
        return 0
    copied = 0
    for root, dirs, files in os.walk(source):
        here = Path(root)
        relative_root = here.relative_to(source)
        dirs[:] = [d for d in dirs if not is_transient(relative_root / d)]
        for name in files:
            relative = relative_root / name
            if is_transient(relative):
                continue
            src = here / name
            dst = dest / relative
            try:
                if dst.is_file() and dst.stat().st_size == src.stat().st_size:
                    continue
                dst.parent.mkdir(parents=True, exist_ok=True)
                shutil.copy2(src, dst)
            except OSError:
                continue  # a file a compiler removed meanwhile, or a full disk: skip it
            copied += 1
    return copied


# JAX writes its cache straight into the persisted dir (its keys hold the path).
_PERSISTED_IN_PLACE = frozenset({"jax"})


def restore(persistent: Path, live: Path) -> int:
    """Copy the persisted cache into the live dir; returns the number of files copied."""
    live.mkdir(parents=True, exist_ok=True)
    if not persistent.is_dir():
        return 0
    return sum(
        _copy_tree(child, live / child.name) if child.is_dir() else _copy_tree_file(child, live)
        for child in persistent.iterdir()
        if child.name not in _PERSISTED_IN_PLACE
    )


def _copy_tree_file(source: Path, live: Path) -> int:
    if is_transient(PurePath(source.name)):
        return 0
    dest = live / source.name
    if dest.is_file() and dest.stat().st_size == source.stat().st_size:
        return 0
    shutil.copy2(source, dest)
    return 1


def persist(live: Path, persistent: Path) -> int:
    """Copy what the job added to the live cache into the persistent dir; returns the count."""
    return _copy_tree(live, persistent)
