"""The compile caches live on local disk while the job runs, and persist in the checkpoint dir.

SageMaker uploads ``/opt/ml/checkpoints`` continuously. Compilers write
thousands of small files there, with transient temp files and lock dirs, and
the S3 prefix is downloaded again before every job. So the compilers write to a
local directory; :func:`restore` copies the persisted cache into it when the
job starts and :func:`persist` copies back what is new when it ends, without
temp files, locks or anything else that only matters to a running compiler.

What :func:`restore_paths` names came from the checkpoint location, which others
may be able to write: the shared cache never signs those files as the job's own
(:func:`~trcomp_container.caching.job_setup.restore_lineage`). These plain copies are a
keyless job's, which trusts its checkpoint location; a job with the team's key restores
only what a keyed job signed there (:mod:`.lineage_signed`).
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path, PurePath

__all__ = ["MANIFEST_NAME", "is_transient", "persist", "restore", "restore_paths"]

MANIFEST_NAME = "trcomp-lineage-manifest.json"
"""A keyed job's signed list of the files it persisted (:mod:`.lineage_signed`), at the
top of the persisted cache; never copied into the live cache."""

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


def _copy_tree(source: Path, dest: Path) -> list[PurePath]:
    """Copy the files of ``source`` that ``dest`` lacks or holds with another size; their
    paths under ``dest``."""
    if not source.is_dir():
        return []
    copied: list[PurePath] = []
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
            copied.append(relative)
    return copied


# JAX writes its cache straight into the persisted dir (its keys hold the path).
_PERSISTED_IN_PLACE = frozenset({"jax"})


def restore_paths(persistent: Path, live: Path) -> list[str]:
    """Copy the persisted cache into the live dir; the files copied, relative to ``live``."""
    live.mkdir(parents=True, exist_ok=True)
    if not persistent.is_dir():
        return []
    copied: list[str] = []
    for child in persistent.iterdir():
        if child.name in _PERSISTED_IN_PLACE:
            continue
        if child.is_dir():
            copied += [
                (PurePath(child.name) / rel).as_posix()
                for rel in _copy_tree(child, live / child.name)
            ]
        elif _copy_tree_file(child, live):
            copied.append(child.name)
    return copied


def restore(persistent: Path, live: Path) -> int:
    """Copy the persisted cache into the live dir; returns the number of files copied."""
    return len(restore_paths(persistent, live))


def _copy_tree_file(source: Path, live: Path) -> bool:
    if is_transient(PurePath(source.name)) or source.name == MANIFEST_NAME:
        return False
    dest = live / source.name
    if dest.is_file() and dest.stat().st_size == source.stat().st_size:
        return False
    shutil.copy2(source, dest)
    return True


def persist(live: Path, persistent: Path) -> int:
    """Copy what the job added to the live cache into the persistent dir; returns the count."""
    return len(_copy_tree(live, persistent))
