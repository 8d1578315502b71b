"""One entry of the shared compile cache: its name, its signature, its archive.

An entry is a gzipped tar holding ``manifest.json`` (format, compatibility
set, files and sizes) and the files under ``files/``. Its name is
``<UTC time>-<SHA-256 of its bytes>[-<HMAC>].tar.gz``. The HMAC (the team's
key, :data:`~trcomp.contract.shared_cache.KEY_ENV`; :mod:`.signing`, purpose
:data:`~.signing.ENTRY`) signs the compatibility set, the time and the digest:
the whole name but the signature, and the set the entry is kept under. Since the
digest is checked against the bytes, it signs the bytes; an entry copied under
another time or into another set's prefix does not verify, and one signed before
the team's ``not_before`` is withdrawn. A reader with a key refuses an entry
without a valid signature from its name alone, before it downloads it, and
checks the digest before it opens the archive: nothing another writer put
there is ever unpacked.

Unpacking is bounded: at most ``limit`` decompressed bytes, every byte of the
tar stream counted (headers too: a GNU long name or a pax record of any size
is refused once the stream passes the limit, before tarfile holds it), no
sparse files, no name twice, every name in the manifest with its size. It all goes to a staging dir
first; :func:`move_staged` then moves it into the live cache in one go, so a
bad entry leaves the live cache as it was.

A writer puts regular files only: a symbolic or hard link in the live cache is
left out and named (:func:`files_of`), never packed as a link member that every
reader would refuse, spoiling the whole entry.
"""

from __future__ import annotations

import calendar
import gzip
import hashlib
import io
import json
import os
import re
import shutil
import stat as stat_module
import tarfile
import tempfile
import time
import zlib
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path, PurePath, PurePosixPath

from trcomp.contract.withdrawal import format_moment
from trcomp_container.caching import signing
from trcomp_container.caching.compat import CompatSet
from trcomp_container.caching.lineage import is_transient
from trcomp_container.caching.signing import Keys
from trcomp_container.caching.stores import Commit, Store

__all__ = [
    "FORMAT",
    "EntryError",
    "EntryWithdrawn",
    "Staged",
    "Stamp",
    "check_name",
    "entry_name",
    "files_of",
    "move_staged",
    "printable",
    "safe_relative",
    "stage_entry",
    "stamp",
    "write_entry",
]

FORMAT = 1
SUFFIX = ".tar.gz"
_NAME = re.compile(
    r"(?P<stamp>\d{8}T\d{6}Z)-(?P<digest>[0-9a-f]{64})(?:-(?P<mac>[0-9a-f]{64}))?\.tar\.gz"
)
_STAMP = "%Y%m%dT%H%M%SZ"
_MANIFEST_MAX = 16 << 20
_MEMBERS_MAX = 200_000


class EntryError(Exception):
    """An entry that cannot be used; the message says why."""


class EntryWithdrawn(EntryError):
    """An entry the team's key signed before the team's ``not_before``: withdrawn."""


@dataclass
class Staged:
    """An entry unpacked into ``staging``: the files to move, the bytes they hold, and the
    bytes of its decompressed tar stream (headers included) that were read."""

    staging: Path
    files: list[str]
    unpacked_bytes: int
    stream_bytes: int = 0


def _signed_fields(compat_key: str, digest: str) -> tuple[bytes, bytes]:
    return compat_key.encode(), digest.encode()


def entry_name(digest: str, compat_key: str, key: bytes | None, when: float | None = None) -> str:
    """The name of an entry whose bytes have SHA-256 ``digest``, written at ``when`` (now);
    signed, with its compatibility set and time, when ``key`` is set."""
    seconds = signing.written_at(when)
    stamp_ = time.strftime(_STAMP, time.gmtime(seconds))
    signature = ""
    if key:
        mac = signing.sign(key, signing.ENTRY, seconds, *_signed_fields(compat_key, digest))
        signature = f"-{mac.hex()}"
    return f"{stamp_}-{digest}{signature}{SUFFIX}"


def check_name(name: str, compat_key: str, keys: Keys) -> str:
    """The digest the entry's bytes must have; raise :class:`EntryError` for a refused name.

    With ``keys`` (the job's current key, and its previous one while keys rotate), an
    entry whose name carries no signature, or a signature that is none of theirs over
    this compatibility set, this time and this digest, is refused here, before it is
    downloaded; one signed before the team's ``not_before`` raises :class:`EntryWithdrawn`.
    """
    match = _NAME.fullmatch(name)
    if match is None:
        raise EntryError("its name is not an entry's (<time>-<sha256>[-<signature>].tar.gz)")
    if not keys:
        return match["digest"]
    if not match["mac"]:
        raise EntryError(
            "it is not signed, and this job reads only entries signed with its key "
            "(TRCOMP_SHARED_CACHE_KEY): written by a job without the key, or by someone else"
        )
    try:
        seconds = calendar.timegm(time.strptime(match["stamp"], _STAMP))
    except ValueError:
        raise EntryError(f"its time ({match['stamp']}) is no date") from None
    verdict = signing.check(
        keys, signing.ENTRY, seconds, bytes.fromhex(match["mac"]),
        *_signed_fields(compat_key, match["digest"]),
    )  # fmt: skip
    if verdict == "bad":
        raise EntryError(
            "its signature is not this job's key's for this name and compatibility set: "
            "written with another key or by someone else, copied under another time or "
            "from another set, or signed by an older trcomp, whose signatures are of "
            "another scheme"
        )
    if verdict == "future":
        raise EntryError(
            f"its signed time ({format_moment(seconds)}) is more than "
            f"{signing.FUTURE_SKEW_S} s ahead of this machine's clock: a copy dated ahead "
            "would outlive every withdrawal"
        )
    if verdict == "withdrawn":
        raise EntryWithdrawn(
            f"withdrawn: signed at {format_moment(seconds)}, before the team's not_before "
            f"({format_moment(keys.not_before or 0)}; docs/remote.md, Withdrawing entries)"
        )
    return match["digest"]


def _sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as handle:
        for block in iter(lambda: handle.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def safe_relative(name: str) -> str:
    """``name`` normalized ("a//b" and "./a/b" are "a/b"), when it stays inside the cache
    (an entry's member, a lineage manifest's file); :class:`EntryError` otherwise."""
    relative = PurePosixPath(name)
    if relative.is_absolute() or not relative.parts or ".." in relative.parts:
        raise EntryError(f"a file outside the cache ({name!r})")
    return str(relative)


def stage_entry(
    archive: Path,
    digest: str,
    compat: CompatSet,
    staging_parent: Path,
    present: set[str],
    *,
    limit: int,
) -> Staged:
    """Check ``archive`` and unpack the files ``present`` lacks into a new staging dir.

    ``digest`` is what :func:`check_name` returned; ``limit`` the most
    decompressed bytes this entry's tar stream may hold, headers included
    (:attr:`Staged.stream_bytes` says how many it held). The caller removes ``staging``.
    """
    if _sha256(archive) != digest:
        raise EntryError("its bytes do not match the checksum in its name (truncated or damaged)")
    staging = Path(tempfile.mkdtemp(prefix=".shared-", dir=staging_parent))
    staged = Staged(staging, [], 0)
    try:
        _unpack(archive, compat, staged, present, limit)
    except (tarfile.TarError, OSError, EOFError, ValueError, zlib.error) as exc:
        shutil.rmtree(staging, ignore_errors=True)
        raise EntryError(f"it cannot be read ({type(exc).__name__}: {exc})") from None
    except BaseException:
        shutil.rmtree(staging, ignore_errors=True)
        raise
    return staged


class _Capped:
    """The decompressed tar stream of an entry, refused past ``limit`` bytes.

    tarfile reads a GNU long name or a pax header whole, into memory, before it
    yields the member: counting only the members' sizes let a small archive hold a
    512 MiB name. Here every byte tarfile asks for counts, and no read asks gzip
    for more than one byte past the limit.
    """

    def __init__(self, source: gzip.GzipFile, limit: int) -> None:
        self._source = source
        self._limit = limit
        self.count = 0

    def read(self, size: int = -1) -> bytes:
        """At most ``size`` bytes; raise :class:`EntryError` once past the limit."""
        room = self._limit - self.count + 1  # one past the limit: enough to see it passed
        data = self._source.read(room if size < 0 else min(size, room))
        self.count += len(data)
        if self.count > self._limit:
            raise _too_big(self.count, self._limit)
        return data


def _unpack(
    archive: Path, compat: CompatSet, staged: Staged, present: set[str], limit: int
) -> None:
    with gzip.GzipFile(archive, "rb") as source:
        stream = _Capped(source, limit)
        try:
            _unpack_stream(stream, compat, staged, present, limit)
        finally:
            staged.stream_bytes = stream.count


def _unpack_stream(
    stream: _Capped, compat: CompatSet, staged: Staged, present: set[str], limit: int
) -> None:
    # A stream ("r|"): tarfile reads forward only, every byte through the cap. A reader
    # is all a stream needs; typeshed asks for a whole file object.
    with tarfile.open(fileobj=stream, mode="r|") as tar:  # type: ignore[call-overload]
        first = tar.next()
        if first is None or first.name != "manifest.json" or not first.isfile():
            raise EntryError("it has no manifest")
        if first.size > _MANIFEST_MAX:
            raise EntryError(f"its manifest is {first.size:,} bytes, more than any entry's")
        manifest_file = tar.extractfile(first)
        manifest = json.load(manifest_file) if manifest_file else {}
        if manifest.get("format") != FORMAT or manifest.get("key") != compat.key:
            raise EntryError(
                f"it was written for another compatibility set ({manifest.get('key')!r})"
            )
        sizes: dict[str, int] = manifest.get("files", {})
        declared = sum(int(size) for size in sizes.values())
        if declared > limit:
            raise _too_big(declared, limit)
        seen: set[str] = set()
        for count, member in enumerate(tar, start=1):
            if count > _MEMBERS_MAX:
                raise EntryError(f"it holds more than {_MEMBERS_MAX:,} files")
            if member.offset == first.offset:
                continue
            regular = member.isreg() and not member.issparse()
            if not regular or not member.name.startswith("files/"):
                shown = printable(member.name)
                raise EntryError(f"it holds something other than a file ({shown!r})")
            relative = safe_relative(member.name.removeprefix("files/"))
            if relative in seen:
                raise EntryError(f"it holds {printable(relative)} twice")
            seen.add(relative)
            if sizes.get(relative) != member.size:
                raise EntryError(f"{printable(relative)} is not in its manifest with that size")
            staged.unpacked_bytes += member.size
            if staged.unpacked_bytes > limit:
                raise _too_big(staged.unpacked_bytes, limit)
            if relative in present:
                continue
            _extract(tar, member, staged.staging / relative)
            staged.files.append(relative)
        if seen != set(sizes):
            raise EntryError("its manifest names files it does not hold")


def _extract(tar: tarfile.TarFile, member: tarfile.TarInfo, target: Path) -> None:
    source = tar.extractfile(member)
    if source is None:
        raise EntryError(f"{printable(member.name)} has no contents")
    target.parent.mkdir(parents=True, exist_ok=True)
    with target.open("xb") as out:
        shutil.copyfileobj(source, out)


def printable(name: str, most: int = 200) -> str:
    """A name from a store or a checkpoint location, for the log and the summary: control
    characters escaped (a planted name with a newline must not add a line of its own to
    the job's log), long names cut."""
    shown = name if name.isprintable() else json.dumps(name, ensure_ascii=False)[1:-1]
    return shown if len(shown) <= most else f"{shown[:most]}... ({len(shown):,} characters)"


def _too_big(size: int, limit: int) -> EntryError:
    return EntryError(
        f"it unpacks to more than the {limit:,} bytes left of the read limit "
        f"(TRCOMP_SHARED_CACHE_MAX_READ_BYTES; at least {size:,})"
    )


def move_staged(staged: Staged, live: Path) -> None:
    """Move what :func:`stage_entry` unpacked into ``live`` (local renames), all or nothing:
    a file where the entry needs a directory, or a directory where it has a file, refuses
    the entry before anything is moved."""
    for relative in staged.files:
        target = live / relative
        if target.is_dir() and not target.is_symlink():
            raise EntryError(f"{relative} is a directory in the live cache: nothing was moved")
        for parent in Path(relative).parents:
            there = live / parent
            if str(parent) != "." and there.exists() and not there.is_dir():
                raise EntryError(
                    f"{parent} is a file in the live cache, where the entry has a directory "
                    "of files: nothing was moved"
                )
    for relative in staged.files:
        target = live / relative
        target.parent.mkdir(parents=True, exist_ok=True)
        os.replace(staged.staging / relative, target)


Stamp = tuple[int, int, int, int]
"""A file's size, mtime, ctime and inode (:func:`stamp`)."""


def stamp(path: Path) -> Stamp:
    """How a file the job did not write (read from the shared cache, restored from the
    lineage) is known to be unchanged at the end: its size, mtime, ctime and inode.

    A lineage file's mtime is its writer's (``copy2``), so the ctime and the inode, which
    no one outside the job sets, are what tell a file the job wrote again from the one it
    was given; a rewrite in place changes the ctime, an atomic rename the inode.
    """
    return _stamp(path.stat())


def _stamp(info: os.stat_result) -> Stamp:
    return info.st_size, info.st_mtime_ns, info.st_ctime_ns, info.st_ino


_NOT_SHARED = frozenset({"precompiled_headers"})
"""Folders a shared entry leaves out. Inductor's precompiled C++ header (CPU kernels,
torch 2.14) is one file of about 150 MB here, tied to the host's compiler, which the
compatibility set does not name; gzip of it alone outlasts the write budget. The
lineage's own cache (the checkpoint location) keeps it."""


def files_of(
    live: Path, skip: Mapping[str, Stamp], links: list[str] | None = None
) -> list[tuple[str, Path]]:
    """The lasting, shareable files of ``live``, but those in ``skip`` with the same
    :func:`stamp`.

    Only regular files with one name count. A symbolic link (to a file or a directory)
    or a file with several names (a hard link) is left out, its relative path appended
    to ``links``: an entry holds regular files only (its readers refuse anything else),
    and a link could carry in what lies outside the live cache.
    """
    return [(relative, path) for relative, path, _ in _walk(live, skip, links)]


def _walk(
    live: Path, skip: Mapping[str, Stamp], links: list[str] | None
) -> list[tuple[str, Path, os.stat_result]]:
    found = []
    for root, dirs, files in os.walk(live):
        here = Path(root)
        relative_root = here.relative_to(live)
        kept = []
        for name in sorted(dirs):
            if is_transient(relative_root / name) or name in _NOT_SHARED:
                continue
            if (here / name).is_symlink():  # os.walk lists it, and does not enter it
                _note(links, relative_root / name)
                continue
            kept.append(name)
        dirs[:] = kept
        for name in sorted(files):
            relative = relative_root / name
            if is_transient(relative):
                continue
            try:
                info = os.lstat(here / name)
            except OSError:
                continue
            if stat_module.S_ISLNK(info.st_mode) or (
                stat_module.S_ISREG(info.st_mode) and info.st_nlink > 1
            ):
                _note(links, relative)
                continue
            if not stat_module.S_ISREG(info.st_mode) or skip.get(relative.as_posix()) == _stamp(
                info
            ):
                continue  # not a file; or read from the shared cache or the lineage, unchanged
            found.append((relative.as_posix(), here / name, info))
    return found


def _note(links: list[str] | None, relative: PurePath) -> None:
    if links is not None:
        links.append(relative.as_posix())


def write_entry(
    store: Store,
    live: Path,
    compat: CompatSet,
    *,
    skip: Mapping[str, Stamp],
    key: bytes | None = None,
    commit: Commit,
    links: list[str] | None = None,
) -> tuple[str, int, int] | None:
    """Put the files of ``live`` as one entry (signed with ``key``), but those in ``skip``;
    the entry appears inside ``commit()`` (the write budget's).

    Returns ``(name, files, bytes)``; ``None`` when the job added or changed
    nothing (a dynamo PGO state it updated counts as changed). Links are left out
    and named in ``links`` (:func:`files_of`). Each file is opened without following
    a link and must still be the file that was listed (same inode, one name, same
    size); one that is not refuses the write before anything is put, so an entry
    is never written that its readers would refuse.
    """
    files = _walk(live, skip, links)
    if not files:
        return None
    with tempfile.TemporaryDirectory(prefix="trcomp-entry-") as tmp:
        archive = Path(tmp) / "entry.tar.gz"
        sizes = {rel: info.st_size for rel, _, info in files}
        manifest = {"format": FORMAT, "key": compat.key, "compat": compat, "files": sizes}
        with tarfile.open(archive, "w:gz") as tar:
            body = json.dumps(manifest, sort_keys=True).encode()
            info = tarfile.TarInfo("manifest.json")
            info.size = len(body)
            tar.addfile(info, io.BytesIO(body))
            for rel, path, listed in files:
                _add_file(tar, rel, path, listed)
        name = entry_name(_sha256(archive), compat.key, key)
        store.put(name, archive, commit)
        return name, len(files), archive.stat().st_size


def _add_file(tar: tarfile.TarFile, relative: str, path: Path, listed: os.stat_result) -> None:
    """Add ``path`` as a regular member, read through a handle that followed no link."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
    except OSError as exc:
        raise EntryError(
            f"{relative} could not be opened as a file ({exc}): nothing written"
        ) from None
    with os.fdopen(fd, "rb") as handle:
        now = os.fstat(handle.fileno())
        same = (now.st_dev, now.st_ino, now.st_size) == (
            listed.st_dev, listed.st_ino, listed.st_size,
        )  # fmt: skip
        if not same or not stat_module.S_ISREG(now.st_mode) or now.st_nlink > 1:
            raise EntryError(
                f"{relative} changed while the entry was written (replaced, linked or "
                "resized): nothing was written"
            )
        member = tarfile.TarInfo(f"files/{relative}")
        member.size = now.st_size
        member.mtime = int(now.st_mtime)
        member.mode = stat_module.S_IMODE(now.st_mode)
        tar.addfile(member, handle)
