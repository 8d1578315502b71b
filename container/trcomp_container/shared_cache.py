"""The shared compile cache (``TrainingCompilerConfig(shared_cache=...)``) in the job.

At the start, :func:`open_shared_cache` reads the entries of this host's
compatibility set (:mod:`trcomp_container.cache_key`) into the live cache dir
the compilers write to; at the end of a successful job :meth:`SharedCache.finish`
writes what the job added as one new entry. ``redis://`` instead turns on
inductor's own remote caches (FX graph, AOTAutograd, autotune, bundled
autotune, dynamo PGO), which read and write Redis while the job compiles.

An entry is a gzipped tar holding ``manifest.json`` (format, compatibility
set, files and sizes) and the files under ``files/``. Its name ends with the
SHA-256 of its bytes: a reader checks it, so a truncated or damaged entry is
skipped with a warning, as is one whose manifest names another compatibility
set, and the job compiles what it lacks. A cache is code (compiled kernels are
loaded and run), so an S3 bucket must be the job's account's (:mod:`.shared_store`).
"""

from __future__ import annotations

import hashlib
import io
import json
import os
import shutil
import tarfile
import tempfile
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath
from typing import Any

from trcomp.contract.errors import SharedCacheError
from trcomp.contract.shared_cache import SharedCacheLocation, parse_location
from trcomp_container.cache import is_transient
from trcomp_container.cache_key import CompatSet
from trcomp_container.shared_store import Store, open_store

__all__ = [
    "MAX_READ_BYTES_ENV",
    "SharedCache",
    "open_shared_cache",
    "read_entry",
    "redis_environment",
    "write_entry",
]

FORMAT = 1
MAX_READ_BYTES_ENV = "TRCOMP_SHARED_CACHE_MAX_READ_BYTES"
_DEFAULT_MAX_READ_BYTES = 4 << 30
_SUFFIX = ".tar.gz"


class EntryError(Exception):
    """An entry that cannot be used; the message says why."""


@dataclass
class SharedCache:
    """The shared cache of one job: where it is, what was read, the job's extra environment."""

    location: SharedCacheLocation
    compat: CompatSet
    store: Store | None
    environment: dict[str, str] = field(default_factory=dict)
    warnings: list[str] = field(default_factory=list)
    facts: dict[str, Any] = field(default_factory=dict)
    read: dict[str, tuple[int, int]] = field(default_factory=dict)

    @property
    def warm(self) -> bool:
        """Whether the job found entries of its compatibility set."""
        return bool(self.facts.get("warm"))

    def finish(self, live: Path, *, succeeded: bool) -> dict[str, Any]:
        """Write what the job compiled as one new entry (successful jobs only); the facts."""
        if self.store is None:  # Redis (inductor writes it), or a store that could not open
            return self.facts
        self.facts.update(files_written=0, bytes_written=0)
        if not succeeded:
            self.facts["not_written"] = "the job failed: its caches are not shared"
            return self.facts
        try:
            written = write_entry(self.store, live, self.compat, skip=self.read)
        except Exception as exc:  # a full bucket, expired credentials: the job's work is done
            self._warn(f"could not write the shared compile cache at {self.store.where}: {exc}")
            return self.facts
        if written is not None:
            self.facts.update(entry_written=written[0], files_written=written[1])
            self.facts["bytes_written"] = written[2]
        return self.facts

    def _warn(self, message: str) -> None:
        self.warnings.append(message)
        self.facts.setdefault("warnings", []).append(message)


def _safe_relative(name: str) -> PurePosixPath:
    relative = PurePosixPath(name)
    if relative.is_absolute() or not relative.parts or ".." in relative.parts:
        raise EntryError(f"it holds a file outside the cache ({name!r})")
    return relative


def read_entry(archive: Path, compat: CompatSet, live: Path, present: set[str]) -> list[str]:
    """Unpack the files of ``archive`` that ``live`` lacks; return their relative paths.

    Everything is checked and unpacked into a staging dir first, so a bad
    entry leaves ``live`` as it was.
    """
    digest = hashlib.sha256()
    with archive.open("rb") as handle:
        for block in iter(lambda: handle.read(1 << 20), b""):
            digest.update(block)
    if not archive.name.removesuffix(_SUFFIX).endswith(digest.hexdigest()):
        raise EntryError("its bytes do not match the checksum in its name (truncated or damaged)")
    staging = Path(tempfile.mkdtemp(prefix=".shared-", dir=live.parent))
    try:
        with tarfile.open(archive, "r:gz") as tar:
            first = tar.next()
            if first is None or first.name != "manifest.json":
                raise EntryError("it has no manifest")
            manifest_file = tar.extractfile(first)
            manifest = json.load(manifest_file) if manifest_file else {}
            if manifest.get("format") != FORMAT or manifest.get("key") != compat.key:
                raise EntryError(
                    f"it was written for another compatibility set ({manifest.get('key')!r})"
                )
            sizes: dict[str, int] = manifest.get("files", {})
            unpacked = []
            for member in tar:
                if member.name == first.name and member.offset == first.offset:
                    continue
                relative = _safe_relative(member.name.removeprefix("files/"))
                if not member.isfile() or not member.name.startswith("files/"):
                    raise EntryError(f"it holds something other than a file ({member.name!r})")
                if sizes.get(str(relative)) != member.size:
                    raise EntryError(f"{relative} is not in its manifest with that size")
                if str(relative) in present:
                    continue
                source = tar.extractfile(member)
                if source is None:
                    raise EntryError(f"{relative} has no contents")
                target = staging / relative
                target.parent.mkdir(parents=True, exist_ok=True)
                with target.open("wb") as out:
                    shutil.copyfileobj(source, out)
                unpacked.append(str(relative))
        for relative_name in unpacked:
            target = live / relative_name
            target.parent.mkdir(parents=True, exist_ok=True)
            os.replace(staging / relative_name, target)
        return unpacked
    except (tarfile.TarError, OSError, EOFError, ValueError, json.JSONDecodeError) as exc:
        raise EntryError(f"it cannot be read ({type(exc).__name__}: {exc})") from None
    finally:
        shutil.rmtree(staging, ignore_errors=True)


def _stamp(path: Path) -> tuple[int, int]:
    stat = path.stat()
    return stat.st_size, stat.st_mtime_ns


def _files_of(live: Path, skip: Mapping[str, tuple[int, int]]) -> list[tuple[str, Path]]:
    """The lasting files of ``live``, but those in ``skip`` with the same size and mtime."""
    found = []
    for root, dirs, files in os.walk(live):
        here = Path(root)
        relative_root = here.relative_to(live)
        dirs[:] = sorted(d for d in dirs if not is_transient(relative_root / d))
        for name in sorted(files):
            relative = relative_root / name
            if is_transient(relative):
                continue
            try:
                if skip.get(relative.as_posix()) == _stamp(here / name):
                    continue  # read from the shared cache and unchanged
            except OSError:
                continue
            found.append((relative.as_posix(), here / name))
    return found


def write_entry(
    store: Store, live: Path, compat: CompatSet, *, skip: Mapping[str, tuple[int, int]]
) -> tuple[str, int, int] | None:
    """Put the files of ``live`` as one entry, but those read unchanged (``skip``).

    Returns ``(name, files, bytes)``; ``None`` when the job added or changed
    nothing (a dynamo PGO state it updated counts as changed).
    """
    files = [(rel, path) for rel, path in _files_of(live, skip) if path.is_file()]
    if not files:
        return None
    with tempfile.TemporaryDirectory(prefix="trcomp-entry-") as tmp:
        archive = Path(tmp) / "entry.tar.gz"
        sizes = {rel: path.stat().st_size for rel, path in files}
        manifest = {"format": FORMAT, "key": compat.key, "compat": compat, "files": sizes}
        with tarfile.open(archive, "w:gz") as tar:
            body = json.dumps(manifest, sort_keys=True).encode()
            info = tarfile.TarInfo("manifest.json")
            info.size = len(body)
            tar.addfile(info, io.BytesIO(body))
            for rel, path in files:
                tar.add(path, arcname=f"files/{rel}", recursive=False)
        digest = hashlib.sha256(archive.read_bytes()).hexdigest()
        stamp = time.strftime("%Y%m%dT%H%M%SZ", time.gmtime())
        name = f"{stamp}-{digest}{_SUFFIX}"
        store.put(name, archive)
        return name, len(files), archive.stat().st_size


def _read_all(cache: SharedCache, store: Store, live: Path, environ: Mapping[str, str]) -> None:
    limit = int(environ.get(MAX_READ_BYTES_ENV) or _DEFAULT_MAX_READ_BYTES)
    facts = cache.facts
    facts.update(entries_read=0, entries_skipped=0, files_read=0, bytes_read=0)
    present = {rel for rel, _ in _files_of(live, {})} if live.is_dir() else set()
    try:
        names = sorted(store.names(), reverse=True)  # newest first: names start with the time
    except Exception as exc:
        cache._warn(f"could not list the shared compile cache at {store.where} ({exc}); cold")
        return
    facts["entries_found"] = len(names)
    live.mkdir(parents=True, exist_ok=True)
    for name, size in names:
        if not name.endswith(_SUFFIX):
            continue
        if facts["bytes_read"] + size > limit:
            facts["read_limit_reached"] = True
            break
        with tempfile.TemporaryDirectory(prefix="trcomp-entry-") as tmp:
            archive = Path(tmp) / name
            try:
                store.get(name, archive)
                unpacked = read_entry(archive, cache.compat, live, present)
            except Exception as exc:
                facts["entries_skipped"] += 1
                cache._warn(
                    f"shared compile cache entry {store.where.rstrip('/')}/{name} was skipped: "
                    f"{exc}. What it held is compiled again."
                )
                continue
        facts["entries_read"] += 1
        facts["files_read"] += len(unpacked)
        facts["bytes_read"] += size
        present.update(unpacked)
        cache.read.update({rel: _stamp(live / rel) for rel in unpacked})
    facts["warm"] = facts["files_read"] > 0


def redis_environment(location: SharedCacheLocation, *, gpu: bool) -> dict[str, str]:
    """Inductor's remote caches on Redis (torch 2.9 names; the image has ``redis``).

    The autotune caches only on GPU hosts: they tune triton kernels, and on CPU
    torch 2.9's bundled autotune cache fails every compile (no backend hash).
    """
    env = {
        "TORCHINDUCTOR_REDIS_URL": location.uri,
        "TORCHINDUCTOR_FX_GRAPH_REMOTE_CACHE": "1",
        "TORCHINDUCTOR_AUTOGRAD_REMOTE_CACHE": "1",
        "TORCH_DYNAMO_AUTOMATIC_DYNAMIC_REMOTE_PGO": "1",
    }
    if gpu:
        env["TORCHINDUCTOR_AUTOTUNE_REMOTE_CACHE"] = "1"
        env["TORCHINDUCTOR_BUNDLED_AUTOTUNE_REMOTE_CACHE"] = "1"
    return env


def _redis_has_entries(location: SharedCacheLocation) -> bool:
    import redis

    client = redis.Redis.from_url(location.uri, socket_timeout=10, socket_connect_timeout=10)
    try:
        return next(iter(client.scan_iter(match="pt2:*", count=1000)), None) is not None
    finally:
        client.close()


def _open_redis(cache: SharedCache, engine: str, remote_job: bool, gpu: bool) -> None:
    location = cache.location
    if remote_job and not location.has_auth:
        cache._warn(
            f"shared_cache {location.shown} has no password: anyone who reaches that Redis "
            "can put compiled code there that this job runs. Use redis://:password@host:port "
            "(or rediss:// with TLS) on a network only your jobs reach."
        )
    if engine != "inductor":
        cache._warn(
            f"shared_cache {location.shown}: Redis serves inductor's caches only; the {engine} "
            "engine keeps its cache in the checkpoint location"
        )
        return
    cache.environment.update(redis_environment(location, gpu=gpu))
    try:
        cache.facts["warm"] = _redis_has_entries(location)
    except Exception as exc:
        cache._warn(f"cannot reach the Redis of shared_cache {location.shown} ({exc}); cold")
        cache.facts["warm"] = False


def open_shared_cache(
    uri: str,
    *,
    compat: CompatSet,
    engine: str,
    live: Path,
    environ: Mapping[str, str],
    remote_job: bool,
    gpu: bool = False,
) -> SharedCache:
    """Read the shared cache at ``uri`` into ``live``; the job's extra environment and facts.

    Raises :class:`~trcomp.contract.errors.SharedCacheError` for an S3 bucket of
    another account; every other problem is a warning and the job compiles cold.
    """
    location = parse_location(uri)
    cache = SharedCache(location=location, compat=compat, store=None)
    cache.facts.update(location=location.shown, kind=location.kind, key=compat.key, warm=False)
    if location.kind == "redis":
        _open_redis(cache, engine, remote_job, gpu)
        return cache
    if engine == "jax":
        # JAX's own XLA sub-caches put the cache dir's path into every key; off, the
        # keys are the same whatever path the cache is reached through.
        cache.environment.update(
            JAX_COMPILATION_CACHE_DIR=os.path.realpath(live / "jax"),
            JAX_PERSISTENT_CACHE_ENABLE_XLA_CACHES="none",
        )
    try:
        cache.store = open_store(location, compat.key, environ)
    except SharedCacheError:
        raise
    except Exception as exc:  # no credentials, no network: compile cold, say so
        cache._warn(f"cannot open shared_cache {location.shown} ({exc}); the job compiles cold")
        return cache
    cache.facts["where"] = cache.store.where
    _read_all(cache, cache.store, live, environ)
    return cache
