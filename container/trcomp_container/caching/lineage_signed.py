"""The lineage's cache in a keyed job: persisted with a signed manifest, restored only as signed.

A job's checkpoint location is no more trusted than a shared store: whoever can
write its prefix (the default one is predictable) could plant a pickle that
inductor loads and runs. So a job with the team's key (a keyed job) restores only
what a keyed job of the same lineage wrote:

- :meth:`SignedLineage.persist` copies the live cache into the checkpoint location
  (each file read without following a link, hashed as it is copied, renamed into
  place) and writes :data:`MANIFEST_NAME` beside it: every file's relative path,
  size and SHA-256, and the time, signed with the team's current key
  (:mod:`.signing`, purpose ``LINEAGE_MANIFEST``; a manifest signed before the
  team's ``not_before`` is withdrawn);
- :meth:`SignedLineage.restore` reads that manifest, checks its signature with the
  current key or the previous one, and copies into the live cache only the files it
  lists whose bytes, hashed as they are copied, match; anything else (no manifest, a
  bad signature, a file it does not list, a changed file, a link) stays where it is,
  counted and named in the job's summary (``lineage``) and in a warning.

A keyless job keeps :mod:`.lineage`'s plain copies: it trusts its checkpoint location.
The key never comes from the checkpoint location: the entrypoint reads it from the
job's environment (:mod:`.cache_secrets`) and hands it in.
"""

from __future__ import annotations

import errno
import hashlib
import json
import os
import stat as stat_module
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath
from typing import Any

from trcomp_container.caching import signing
from trcomp_container.caching.entry import EntryError, Stamp, printable, safe_relative, stamp
from trcomp_container.caching.lineage import MANIFEST_NAME, is_transient
from trcomp_container.caching.signing import Keys

__all__ = ["MANIFEST_NAME", "NAMED_REFUSED", "SignedLineage"]

FORMAT = 2
_MANIFEST_MAX = 64 << 20
NAMED_REFUSED = 20
"""Refused files named in the summary (``lineage.refused``); the rest are counted."""
_NAMED_IN_WARNING = 5

_UNSIGNED = "not in a signed manifest"
_UNREADABLE = (ValueError, KeyError, TypeError, RecursionError, OverflowError)
"""What reading a manifest raises: JSON nested past the parser's depth (RecursionError), a
time of ``Infinity`` or ``1e400`` (OverflowError), or anything else that is not one."""


class _Refused(Exception):
    """A file of the checkpoint location that is not restored; the message says why."""


@dataclass
class SignedLineage:
    """The lineage of one keyed job: the keys it checks with, what it restored, its facts.

    ``keys``: the current key first (it signs), then the previous one while keys rotate,
    and the team's ``not_before``: a manifest signed earlier is withdrawn.
    ``verified`` holds each restored file's stamp in the live cache and SHA-256, so
    :meth:`persist` need not hash again what the job left unchanged.
    """

    keys: Keys
    verified: dict[str, tuple[Stamp, str]] = field(default_factory=dict)
    facts: dict[str, Any] = field(default_factory=lambda: {"signed": True})
    warnings: list[str] = field(default_factory=list)

    def restore(self, persistent: Path, live: Path) -> list[str]:
        """Copy into ``live`` the files of ``persistent`` its signed manifest vouches for;
        their paths relative to ``live``. Every other file is named in :attr:`facts`."""
        live.mkdir(parents=True, exist_ok=True)
        if not persistent.is_dir():
            self.facts.update(manifest="none", files_restored=0, files_refused=0)
            return []
        listed, status = self._read_manifest(persistent)
        self.facts["manifest"] = status
        refused: dict[str, str] = {}
        copied: list[str] = []
        found: set[str] = set()
        for relative, path in _walk(persistent, refused):
            found.add(relative)
            try:
                if relative not in listed:
                    raise _Refused(_UNSIGNED if status == "verified" else f"manifest {status}")
                size, digest = listed[relative]
                target = live / relative
                if _same_size_file(target, size):
                    continue  # the shared cache's (signed too): it stays
                _copy(path, target, size=size, digest=digest)
            except _Refused as why:
                refused[relative] = str(why)
                continue
            except OSError as exc:
                refused[relative] = f"could not be copied ({exc.strerror or exc})"
                continue
            self.verified[relative] = (stamp(target), digest)
            copied.append(relative)
        self.facts.update(
            files_restored=len(copied),
            files_missing=len(set(listed) - found),
            files_refused=len(refused),
        )
        self._name_refused(persistent, refused)
        return copied

    def persist(self, live: Path, persistent: Path) -> int:
        """Copy the live cache's files into ``persistent`` and sign the manifest of all of
        them with the current key; the number of files copied (those already there, as
        restored, are listed without a copy)."""
        key = self.keys.current
        assert key is not None, "a keyed job's lineage has a key"
        files: dict[str, list[Any]] = {}
        links: dict[str, str] = {}
        saved = 0
        persistent.mkdir(parents=True, exist_ok=True)
        root = os.path.realpath(persistent)
        for relative, path in _walk(live, links):
            target = persistent / relative
            try:
                where = os.path.join(root, *PurePosixPath(relative).parts[:-1])
                if os.path.realpath(target.parent) != where:
                    links[relative] = "a link in the checkpoint location on its way"
                    continue
                known = self.verified.get(relative)
                if known is not None and known[0] == stamp(path):
                    size = path.stat().st_size
                    if not _same_size_file(target, size):
                        _copy(path, target, size=size, digest=known[1])
                        saved += 1
                    files[relative] = [size, known[1]]
                    continue
                files[relative] = list(_copy(path, target))
                saved += 1
            except (OSError, _Refused):
                continue  # removed meanwhile, or a full disk: not listed, so never restored
        when = signing.written_at()
        manifest = {"format": FORMAT, "written": when, "files": files}
        body = json.dumps(manifest, sort_keys=True)
        mac = signing.sign(key, signing.LINEAGE_MANIFEST, when, body.encode())
        document = json.dumps({"manifest": body, "written": when, "mac": mac.hex()})
        _write_atomically(persistent / MANIFEST_NAME, document.encode())
        self.facts.update(files_saved=saved, files_signed=len(files))
        if links:
            self.facts["links_left_out"] = sorted(links)[:NAMED_REFUSED]
            self.facts["links_left_out_count"] = len(links)
        return saved

    def _read_manifest(self, persistent: Path) -> tuple[dict[str, tuple[int, str]], str]:
        """The files the manifest lists, with their size and SHA-256, and what became of it:
        ``verified``, ``missing`` or why it was refused."""
        try:
            raw = _read_regular(persistent / MANIFEST_NAME, _MANIFEST_MAX)
        except FileNotFoundError:
            return {}, "missing"
        except _Refused as why:
            return {}, f"refused: {why}"
        except OSError as exc:
            return {}, f"refused: unreadable ({exc.strerror or exc})"
        try:
            document = json.loads(raw)
            body, when = str(document["manifest"]), int(document["written"])
            mac = bytes.fromhex(str(document["mac"]))
        except _UNREADABLE:  # whoever writes the location wrote it: refused, never raised
            return {}, "refused: not a signed manifest"
        verdict = signing.check(self.keys, signing.LINEAGE_MANIFEST, when, mac, body.encode())
        if verdict == "bad":
            return {}, "refused: its signature is not this job's key's"
        if verdict == "future":
            return {}, "refused: signed at a time ahead of this machine's clock"
        if verdict == "withdrawn":
            return {}, "refused: withdrawn (signed before the team's not_before)"
        try:
            manifest = json.loads(body)
            if manifest.get("written") != when:
                return {}, "refused: its signed time is not the manifest's"
            if manifest.get("format") != FORMAT:
                return {}, f"refused: format {manifest.get('format')!r} is not {FORMAT}"
            listed = {
                safe_relative(relative): (int(size), str(digest))
                for relative, (size, digest) in dict(manifest["files"]).items()
            }
        except (*_UNREADABLE, AttributeError, EntryError) as exc:
            return {}, f"refused: malformed ({exc})"
        self.facts["manifest_written"] = manifest.get("written")
        return listed, "verified"

    def _name_refused(self, persistent: Path, refused: dict[str, str]) -> None:
        if not refused:
            return
        shown = [f"{printable(relative)} ({why})" for relative, why in sorted(refused.items())]
        self.facts["refused"] = shown[:NAMED_REFUSED]
        more = len(shown) - _NAMED_IN_WARNING
        self.warnings.append(
            f"{len(shown)} file(s) of the compile cache in the checkpoint location {persistent} "
            f"were not restored: {'; '.join(shown[:_NAMED_IN_WARNING])}"
            + (f"; and {more} more" if more > 0 else "")
            + ". A job with the team's key restores only files a job with the key wrote "
            "and signed there; what they held is compiled again. Files no keyed job wrote "
            "(an older trcomp's, a job without the key's, or someone else's) are refused at "
            "every start: delete them from the checkpoint location."
        )


def _walk(top: Path, links: dict[str, str]) -> list[tuple[str, Path]]:
    """The lasting regular files under ``top`` (no temp files, locks, or the manifest), as
    relative paths; symbolic links (never followed) and anything not a file go to ``links``."""
    found: list[tuple[str, Path]] = []
    for root, dirs, files in os.walk(top):
        here = Path(root)
        relative_root = PurePosixPath(here.relative_to(top).as_posix())
        kept = []
        for name in sorted(dirs):
            relative = relative_root / name
            if is_transient(relative):
                continue
            if (here / name).is_symlink():
                links[relative.as_posix()] = "a link"
                continue
            kept.append(name)
        dirs[:] = kept
        for name in sorted(files):
            relative = relative_root / name
            if is_transient(relative) or relative.as_posix() == MANIFEST_NAME:
                continue
            try:
                mode = os.lstat(here / name).st_mode
            except OSError:
                continue
            if not stat_module.S_ISREG(mode):
                links[relative.as_posix()] = "a link" if stat_module.S_ISLNK(mode) else "not a file"
                continue
            found.append((relative.as_posix(), here / name))
    return found


def _same_size_file(path: Path, size: int) -> bool:
    try:
        info = os.lstat(path)
    except OSError:
        return False
    return stat_module.S_ISREG(info.st_mode) and info.st_size == size


def _open_regular(path: Path) -> int:
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
    except OSError as exc:
        if exc.errno == errno.ELOOP:
            raise _Refused("a link") from None
        raise
    if not stat_module.S_ISREG(os.fstat(fd).st_mode):
        os.close(fd)
        raise _Refused("not a file")
    return fd


def _read_regular(path: Path, most: int) -> bytes:
    with os.fdopen(_open_regular(path), "rb") as handle:
        data = handle.read(most + 1)
    if len(data) > most:
        raise _Refused(f"more than {most:,} bytes")
    return data


def _copy(
    source: Path, target: Path, *, size: int | None = None, digest: str | None = None
) -> tuple[int, str]:
    """Copy ``source`` to ``target`` through a temp file renamed into place, hashing the
    bytes as they are copied; ``(size, sha256)``. With ``size`` and ``digest``, bytes that
    do not match are refused and nothing is left at ``target``."""
    with os.fdopen(_open_regular(source), "rb") as handle:
        info = os.fstat(handle.fileno())
        if size is not None and info.st_size != size:
            raise _Refused("changed since a keyed job signed it (another size)")
        target.parent.mkdir(parents=True, exist_ok=True)
        temp = target.with_name(f".{target.name}.{os.getpid()}.trcomp.tmp")
        hashed = hashlib.sha256()
        copied = 0
        try:
            with temp.open("wb") as out:
                for block in iter(lambda: handle.read(1 << 20), b""):
                    hashed.update(block)
                    out.write(block)
                    copied += len(block)
            if digest is not None and (copied != size or hashed.hexdigest() != digest):
                raise _Refused("changed since a keyed job signed it (other bytes)")
            os.utime(temp, ns=(info.st_atime_ns, info.st_mtime_ns))
            os.replace(temp, target)
        except BaseException:
            temp.unlink(missing_ok=True)
            raise
    return copied, hashed.hexdigest()


def _write_atomically(path: Path, data: bytes) -> None:
    temp = path.with_name(f".{path.name}.{os.getpid()}.trcomp.tmp")
    try:
        temp.write_bytes(data)
        os.replace(temp, path)
    except BaseException:
        temp.unlink(missing_ok=True)
        raise
