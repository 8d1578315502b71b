"""A ``file://`` shared cache location: checked and used through one open directory handle.

A compile cache is code, so a directory is trusted only when no one but this user
could write it or swap it: it must be this user's and writable by neither group nor
others, and every directory above it, up to ``/``, this user's or root's and writable
by neither group nor others unless its sticky bit is set (``/tmp``): whoever can write
a parent can rename the cache away and put their own in its place (the rule of
OpenSSH's ``StrictModes``).

Checking paths and then using them races with whoever renames a component in
between (the check skipped a component that did not exist yet; another local user
renamed their own folder in under ``/tmp`` before the listing). So the path is
walked from ``/`` one component at a time, each opened relative to its parent's
handle without following links (``O_DIRECTORY | O_NOFOLLOW``), created with mode
0700 where missing, and checked on the handle itself (``fstat``):
:func:`open_directory` returns the checked directory's handle, and the store lists,
reads and writes relative to it (``dir_fd=``), so a rename after the check changes
nothing the job reads. Standard library only: the SDK checks with it before a job
starts (:func:`check_directory`), the container opens its store with it.
"""

from __future__ import annotations

import errno
import os
import stat
from pathlib import Path

from trcomp.contract.errors import SharedCacheError

__all__ = ["DIRECTORY_MODE", "check_directory", "open_child", "open_directory"]

DIRECTORY_MODE = 0o700
"""The mode of each directory the job creates (whatever the umask)."""
_OPEN_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC


def _uid() -> int:
    return os.geteuid()


def open_directory(path: Path, *, where: str, create: bool = True) -> int | None:
    """The checked handle of the directory ``path`` (the caller closes it); None when it
    is missing and ``create`` is false.

    Symbolic links in ``path`` are resolved once, first; from then on no link is
    followed: a component that became one is refused. ``where`` names the caller in a
    refusal (:class:`~trcomp.contract.errors.SharedCacheError`).
    """
    resolved = Path(os.path.realpath(path))
    handle = os.open("/", _OPEN_FLAGS)
    try:
        _check(handle, Path("/"), shown=path, where=where, own=resolved == Path("/"))
    except BaseException:
        os.close(handle)
        raise
    current = Path("/")
    for name in resolved.parts[1:]:
        current = current / name
        try:
            child = open_child(
                handle, name, shown=path, at=current, where=where, create=create,
                own=current == resolved,
            )  # fmt: skip
        finally:
            os.close(handle)
        if child is None:
            return None
        handle = child
    return handle


def open_child(
    parent: int,
    name: str,
    *,
    shown: Path,
    at: Path,
    where: str,
    create: bool = True,
    own: bool = True,
) -> int | None:
    """The checked handle of the directory ``name`` in the directory ``parent`` (a
    handle), created with :data:`DIRECTORY_MODE` where missing and ``create``; None when
    missing and not ``create``.

    ``own``: it must be this user's and writable by no one else (the location, and the
    set's directory in it); else it is a directory above the location (this user's or
    root's, writable by others only when sticky). ``shown`` and ``at`` name the
    location and this directory in a refusal.
    """
    try:
        handle = _open(parent, name, shown, at, where)
    except FileNotFoundError:
        if not create:
            return None
        try:
            os.mkdir(name, DIRECTORY_MODE, dir_fd=parent)
            made = True
        except FileExistsError:  # made meanwhile: checked like any other
            made = False
        handle = _open(parent, name, shown, at, where)
        # mkdir's mode is masked by the umask, fchmod's is not; only a directory of
        # ours, never one someone else slipped in (the check below refuses that one).
        if made and os.fstat(handle).st_uid == _uid():
            os.fchmod(handle, DIRECTORY_MODE)
    try:
        _check(handle, at, shown=shown, where=where, own=own)
    except BaseException:
        os.close(handle)
        raise
    return handle


def check_directory(path: Path, *, where: str) -> Path:
    """Refuse a ``file://`` location that someone other than this user could write or
    swap (the part of it that exists: the job creates the rest, and checks it); the
    resolved path that was checked."""
    handle = open_directory(path, where=where, create=False)
    if handle is not None:
        os.close(handle)
    return Path(os.path.realpath(path))


def _open(parent: int, name: str, shown: Path, at: Path, where: str) -> int:
    """``name`` in ``parent``, never through a link; FileNotFoundError when missing."""
    try:
        return os.open(name, _OPEN_FLAGS, dir_fd=parent)
    except FileNotFoundError:
        raise
    except OSError as exc:
        if isinstance(exc, NotADirectoryError) or exc.errno == errno.ELOOP:  # O_NOFOLLOW on a link
            why = (
                "not a directory (a symbolic link put there after the path was resolved, or a file)"
            )
            raise SharedCacheError(_foreign(shown, at, where, why)) from None
        raise SharedCacheError(f"cannot check shared_cache directory {at}: {exc}") from None


def _check(handle: int, at: Path, *, shown: Path, where: str, own: bool) -> None:
    info = os.fstat(handle)
    uid = _uid()
    mode = stat.filemode(info.st_mode)
    writable = info.st_mode & (stat.S_IWGRP | stat.S_IWOTH)
    if own:
        if info.st_uid != uid:
            raise SharedCacheError(_foreign(shown, at, where, f"owned by uid {info.st_uid}"))
        if writable:
            why = f"writable by group or others ({mode})"
            raise SharedCacheError(_foreign(shown, at, where, why))
        return
    if info.st_uid not in (uid, 0):
        why = f"owned by uid {info.st_uid}, neither this user nor root"
        raise SharedCacheError(_foreign(shown, at, where, why))
    if writable and not info.st_mode & stat.S_ISVTX:
        why = f"writable by group or others without the sticky bit ({mode})"
        raise SharedCacheError(_foreign(shown, at, where, why))


def _foreign(path: Path, current: Path, where: str, why: str) -> str:
    return (
        f"shared_cache directory {path} may be written by someone else ({current} is {why}), "
        f"so trcomp refuses it ({where}): a compile cache is code that every job reading it "
        f"runs. The directory must be yours, each one above it yours or root's, and none "
        f"writable by group or others unless sticky like /tmp (chown; chmod go-w {current}), "
        "or choose a directory that is."
    )
