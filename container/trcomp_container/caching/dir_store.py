"""A ``file://`` shared cache's entries: files in one directory, used through its handle.

The location is walked and checked once, component by component, and the
directory of the job's compatibility set is kept open (:mod:`trcomp.contract.owned_dirs`):
every listing, read, write and removal after that is relative to that handle
(``dir_fd=``, ``os.scandir`` of the handle) and follows no link, so renaming a
component of the path after the check (another local user's folder swapped in
under ``/tmp``), or repointing a link on it, changes nothing the job reads or writes.

An entry is written to a temp file next to it and renamed into place, so a reader
sees a whole entry or none (POSIX rename; NFS and EFS keep it atomic within a
directory).
"""

from __future__ import annotations

import contextlib
import os
import shutil
import stat
import time
import uuid
import weakref
from collections.abc import Callable
from contextlib import AbstractContextManager
from pathlib import Path
from typing import BinaryIO, NamedTuple

from trcomp.contract.owned_dirs import open_child, open_directory
from trcomp_container.caching.budget import Cancelled

__all__ = [
    "PARTIAL",
    "STALE_PARTIAL_S",
    "DirectoryStore",
    "EntryChanged",
    "ForeignEntry",
    "Listed",
    "copy_listed",
]

PARTIAL = ".partial-"
"""Temp files of a write start with this; listings skip them."""
STALE_PARTIAL_S = 3600
"""A partial entry older than this is a dead writer's (a write's budget is at most 600 s)."""
_CHUNK = 1 << 20
_READ = os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC
_WRITE = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC
_ENTRY_MODE = 0o644
_WHERE = "in the job"


class Listed(NamedTuple):
    """One entry as the listing showed it."""

    name: str
    size: int
    """Bytes; a get reads no more (and one more byte to refuse an entry that grew)."""
    version: str = ""
    """S3's ETag, which a get names (``IfMatch``); "" for a directory's file."""


class EntryChanged(Exception):
    """An entry that is not the one listed (replaced since, by a larger one)."""


class ForeignEntry(Exception):
    """An entry of another user, or one others may write: never read."""


class DirectoryStore:
    """Entries as files in ``<location>/<set>/`` (``root``): a shared file system or a
    local directory, opened once and used through its handle."""

    def __init__(self, root: Path) -> None:
        self.where = str(root)
        self._root = root
        self._handle: int | None = None
        try:
            self._open(create=True)
        except OSError:
            # Read-only here (a reader's mount): what exists is still checked and read.
            self._open(create=False)

    def _open(self, *, create: bool) -> int | None:
        """Open (creating where missing and ``create``) and check the location, then its
        set's directory in it; each must be this user's and writable by no one else."""
        location = open_directory(self._root.parent, where=_WHERE, create=create)
        if location is None:
            return None
        try:
            handle = open_child(
                location, self._root.name, shown=self._root, at=self._root, where=_WHERE,
                create=create,
            )  # fmt: skip
        finally:
            os.close(location)
        if handle is not None:
            self._handle = handle
            weakref.finalize(self, os.close, handle)
        return handle

    def names(self) -> list[Listed]:
        if self._handle is None:
            return []
        found = []
        # A handle of its own for the listing: scandir moves the offset of the one it reads.
        listing = os.open(".", os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC, dir_fd=self._handle)
        try:
            with os.scandir(listing) as entries:
                names = [entry.name for entry in entries]
        finally:
            os.close(listing)
        for name in names:
            if name.startswith(PARTIAL):
                self._remove_if_stale(name)
                continue
            try:
                info = os.stat(name, dir_fd=self._handle, follow_symlinks=False)
            except OSError:
                continue  # removed meanwhile (a lifecycle clean-up)
            if stat.S_ISREG(info.st_mode):
                found.append(Listed(name, info.st_size))
        return found

    def get(self, listed: Listed, dest: Path, *, stop: Callable[[], bool]) -> None:
        if self._handle is None:
            raise FileNotFoundError(listed.name)
        with os.fdopen(os.open(listed.name, _READ, dir_fd=self._handle), "rb") as source:
            _check_entry(os.fstat(source.fileno()))
            copy_listed(source, dest, listed, stop)

    def put(
        self, name: str, source: Path, commit: Callable[[], AbstractContextManager[None]]
    ) -> None:
        handle = self._handle if self._handle is not None else self._open(create=True)
        if handle is None:  # created above, or refused: never None here
            raise FileNotFoundError(self.where)
        partial = f"{PARTIAL}{uuid.uuid4().hex}"
        try:
            out = os.open(partial, _WRITE, _ENTRY_MODE, dir_fd=handle)
            with os.fdopen(out, "wb") as target, source.open("rb") as body:
                shutil.copyfileobj(body, target)
                os.fchmod(target.fileno(), _ENTRY_MODE)
            with commit():  # past the budget: the entry never appears
                os.replace(partial, name, src_dir_fd=handle, dst_dir_fd=handle)
        finally:
            with contextlib.suppress(FileNotFoundError):
                os.unlink(partial, dir_fd=handle)

    def _remove_if_stale(self, name: str) -> None:
        """Remove a partial entry older than :data:`STALE_PARTIAL_S` (its writer died)."""
        try:
            info = os.stat(name, dir_fd=self._handle, follow_symlinks=False)
            if time.time() - info.st_mtime > STALE_PARTIAL_S:
                os.unlink(name, dir_fd=self._handle)
        except OSError:
            pass  # gone meanwhile, or not ours to remove: it is never read either way


def _check_entry(info: os.stat_result) -> None:
    """Refuse an entry someone else could have written or could rewrite in place: one of
    another user (left there while the folder was open to others, before its user made it
    pass), or writable by group or others. Checked on the open file, so nothing it names
    after the check is another file."""
    if not stat.S_ISREG(info.st_mode):
        raise ForeignEntry("it is not a file")
    if info.st_uid != os.geteuid():
        raise ForeignEntry(
            f"it is owned by uid {info.st_uid}, not this user: someone else wrote it, "
            "maybe while the folder was open to others; delete it"
        )
    if info.st_mode & (stat.S_IWGRP | stat.S_IWOTH):
        raise ForeignEntry(
            f"it is writable by group or others ({stat.filemode(info.st_mode)}): chmod go-w it"
        )


def copy_listed(source: BinaryIO, dest: Path, listed: Listed, stop: Callable[[], bool]) -> None:
    """Copy at most ``listed.size`` bytes of ``source`` to ``dest``, in chunks, asking
    ``stop`` before each: a read thread whose budget ended stops, instead of reading on."""
    left = listed.size + 1  # one byte more: enough to see that the entry grew
    with dest.open("wb") as out:
        while left > 0:
            if stop():
                raise Cancelled
            chunk = source.read(min(_CHUNK, left))
            if not chunk:
                return
            out.write(chunk)
            left -= len(chunk)
    raise EntryChanged(
        f"it holds more than the {listed.size:,} bytes it was listed with: replaced since "
        "the listing"
    )
