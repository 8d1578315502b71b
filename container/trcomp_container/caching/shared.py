"""The shared compile cache (``TrainingCompilerConfig(shared_cache=...)``) in the job.

At the start, :func:`open_shared_cache` reads the entries of this host's
compatibility set (:mod:`.compat`) into the live cache dir
the compilers write to; at the end of a successful job :meth:`SharedCache.finish`
writes what the job added as one new entry, from the job's first host only.
``redis://``/``rediss://`` instead turns on inductor's own remote caches
(:mod:`.redis_cache`).

A cache is code (compiled kernels are loaded and run), so what is read is
checked before anything is unpacked (:mod:`.entry`): with the team's
key (``TRCOMP_SHARED_CACHE_KEY``) only entries signed with it; in any case a
location only this job's account or user can write (:mod:`.stores`).
A damaged entry, or one of another compatibility set, is skipped with a
warning and the job compiles what it lacks.

The read and the write each get ``shared_cache_timeout_s`` of wall-clock time
(:class:`~trcomp_container.caching.budget.Budget`): a store that hangs makes the job
start with what was read by then, never wait.
"""

from __future__ import annotations

import os
import shutil
import tempfile
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from trcomp.contract.errors import SharedCacheError
from trcomp.contract.shared_cache import MAX_READ_BYTES_ENV, SharedCacheLocation, parse_location
from trcomp.contract.shared_trust import refuse_keyless_team_cache
from trcomp.contract.withdrawal import format_moment
from trcomp_container.caching.budget import Budget
from trcomp_container.caching.cache_secrets import team_keys
from trcomp_container.caching.compat import CompatSet
from trcomp_container.caching.entry import (
    SUFFIX,
    EntryError,
    EntryWithdrawn,
    Stamp,
    check_name,
    files_of,
    move_staged,
    printable,
    stage_entry,
    stamp,
    write_entry,
)
from trcomp_container.caching.redis_cache import RedisFound, open_redis
from trcomp_container.caching.signing import Keys
from trcomp_container.caching.stores import Store, open_store

__all__ = [
    "DEFAULT_TIMEOUT_S",
    "MAX_READ_BYTES_ENV",
    "NAMED_SKIPS",
    "SharedCache",
    "open_shared_cache",
    "read_limit",
]

DEFAULT_TIMEOUT_S = 5.0
_DEFAULT_MAX_READ_BYTES = 4 << 30
NAMED_SKIPS = 5
"""Skipped entries named in a warning each; the rest are counted in one."""
NAMED_LINKS = 20
"""Links left out of the job's entry named in its facts (``links_left_out``)."""


@dataclass
class SharedCache:
    """The shared cache of one job: where, what was read, the job's extra environment.

    ``key`` is the team's signing key (None: entries are neither signed nor
    checked), ``keys`` the keys a signature is checked with (``key`` first, then the
    previous key while the team rotates) and the team's ``not_before``; ``writer``
    whether this host writes the job's entry. ``read`` and
    ``from_lineage`` hold the files the job was given (by the shared cache, by its
    checkpoint location) as they were given: the job's entry leaves them out unless the
    job wrote them again.
    """

    location: SharedCacheLocation
    compat: CompatSet
    store: Store | None
    environment: dict[str, str] = field(default_factory=dict)
    warnings: list[str] = field(default_factory=list)
    facts: dict[str, Any] = field(default_factory=dict)
    read: dict[str, Stamp] = field(default_factory=dict)
    from_lineage: dict[str, Stamp] = field(default_factory=dict)
    key: bytes | None = None
    keys: Keys = field(default_factory=Keys)
    timeout_s: float = DEFAULT_TIMEOUT_S
    writer: bool = True

    @property
    def warm(self) -> bool:
        """Whether the job found entries of its compatibility set."""
        return bool(self.facts.get("warm"))

    def keep_out(self, live: Path, relatives: list[str]) -> None:
        """Leave the files ``relatives`` of ``live`` out of the job's entry while they stay as
        they are now: they came from the job's checkpoint location (its lineage), which
        someone without the key may have written, so the job's key must not sign them."""
        for relative in relatives:
            try:
                self.from_lineage[relative] = stamp(live / relative)
            except OSError:
                continue  # gone already: nothing to leave out
        if self.store is not None:
            self.facts["lineage_files_left_out"] = len(self.from_lineage)

    def finish(self, live: Path, *, succeeded: bool) -> dict[str, Any]:
        """Write what the job compiled as one new entry (successful jobs only); the facts."""
        if self.store is None:  # Redis (inductor writes it), or a store that could not open
            return self.facts
        self.facts.update(files_written=0, bytes_written=0)
        if not succeeded:
            self.facts["not_written"] = "the job failed: its caches are not shared"
            return self.facts
        if not self.writer:
            self.facts["not_written"] = "the job's first host writes its entry"
            return self.facts
        store, budget = self.store, Budget(self.timeout_s, name="trcomp-shared-write")
        links: list[str] = []
        try:
            done, written = budget.run(
                lambda: write_entry(
                    store,
                    live,
                    self.compat,
                    skip={**self.read, **self.from_lineage},
                    key=self.key,
                    commit=budget.commit,
                    links=links,
                )
            )
        # Broad on purpose: the store is boto3 or a file system, whose errors (a full
        # bucket, expired credentials) share no base class, and the job's work is done.
        except Exception as exc:
            self._warn(f"could not write the shared compile cache at {store.where}: {exc}")
            return self.facts
        finally:
            self._note_links(links)
        if not done:
            self.facts["write_budget_hit"] = True
            self._warn(
                f"writing the shared compile cache at {store.where} took more than "
                f"shared_cache_timeout_s={self.timeout_s:g}; the job ended without sharing what "
                "it compiled. Check the store, or raise shared_cache_timeout_s."
            )
        elif written is not None:
            self.facts.update(entry_written=written[0], files_written=written[1])
            self.facts["bytes_written"] = written[2]
        return self.facts

    def _note_links(self, links: list[str]) -> None:
        """Name the links the job's entry left out (:func:`~.entry.files_of`)."""
        if not links:
            return
        shown = sorted(set(links))
        self.facts["links_left_out"] = shown[:NAMED_LINKS]
        self.facts["links_left_out_count"] = len(shown)
        more = f" and {len(shown) - NAMED_SKIPS} more" if len(shown) > NAMED_SKIPS else ""
        self._warn(
            f"{len(shown)} link(s) in the live compile cache were left out of the job's shared "
            f"entry ({', '.join(shown[:NAMED_SKIPS])}{more}): an entry holds regular files "
            "only. The rest was written; whatever made the links compiles those again."
        )

    def _warn(self, message: str) -> None:
        self.warnings.append(message)
        self.facts.setdefault("warnings", []).append(message)


def read_limit(environ: Mapping[str, str]) -> int:
    """:data:`MAX_READ_BYTES_ENV` (unpacked bytes); raise SharedCacheError when malformed."""
    text = (environ.get(MAX_READ_BYTES_ENV) or "").strip()
    if not text:
        return _DEFAULT_MAX_READ_BYTES
    try:
        value = int(text.replace("_", ""))
    except ValueError:
        value = -1
    if value < 0:
        raise SharedCacheError(
            f"{MAX_READ_BYTES_ENV}={text[:40]!r} is not a number of bytes: set it to a whole "
            f"number such as {_DEFAULT_MAX_READ_BYTES} (4 GiB, the default), or unset it"
        )
    return value


def _open_and_read(
    cache: SharedCache, live: Path, environ: Mapping[str, str], limit: int, budget: Budget
) -> None:
    """The read of the shared cache, in the budget's thread; every change through a commit."""
    keys = team_keys(environ, timeout_s=cache.timeout_s)
    key = keys.current
    try:
        store = open_store(
            cache.location, cache.compat.key, environ, keyed=key is not None,
            timeout_s=cache.timeout_s,
        )  # fmt: skip
    except SharedCacheError:
        raise
    # Broad on purpose: boto3 (no credentials, no network) or the file system; the
    # job compiles cold and says so. What it must not trust is a SharedCacheError.
    except Exception as exc:
        with budget.commit():
            cache._warn(
                f"cannot open shared_cache {cache.location.shown} ({exc}); the job compiles cold"
            )
        return
    with budget.commit():
        cache.store, cache.key, cache.keys = store, key, keys
        cache.facts.update(where=store.where, signed=key is not None)
        if len(keys.keys) > 1:
            cache.facts["previous_key"] = True
        if keys.not_before is not None:
            cache.facts.update(not_before=format_moment(keys.not_before), entries_withdrawn=0)
    _read_all(cache, store, live, limit, budget)


def _read_all(cache: SharedCache, store: Store, live: Path, limit: int, budget: Budget) -> None:
    facts = cache.facts
    try:
        names = sorted(store.names(), reverse=True)  # newest first: names start with the time
    except Exception as exc:  # broad: boto3's or the file system's, as in _open_and_read
        with budget.commit():
            cache._warn(f"could not list the shared compile cache at {store.where} ({exc}); cold")
        return
    present = {rel for rel, _ in files_of(live, {})} if live.is_dir() else set()
    with budget.commit():
        facts["entries_found"] = len(names)
        live.mkdir(parents=True, exist_ok=True)
    skipped: list[str] = []
    spent = 0  # decompressed bytes of the entries read, tar headers included: what the limit counts
    for listed in names:
        name, size = listed.name, listed.size
        if not name.endswith(SUFFIX):
            continue
        try:
            digest = check_name(name, cache.compat.key, cache.keys)  # before any download
            if spent + size > limit:
                # Skipped, not the end: one huge entry must not crowd out the others.
                with budget.commit():
                    facts["read_limit_reached"] = True
                raise EntryError(
                    f"its {size} bytes are more than what is left of the read limit "
                    f"({limit - spent} of {limit} bytes, {MAX_READ_BYTES_ENV})"
                )
            with tempfile.TemporaryDirectory(prefix="trcomp-entry-") as tmp:
                archive = Path(tmp) / "entry.tar.gz"
                store.get(listed, archive, stop=lambda: budget.cancelled)
                staged = stage_entry(
                    archive, digest, cache.compat, live.parent, present,
                    limit=limit - spent,
                )  # fmt: skip
            try:
                with budget.commit():
                    move_staged(staged, live)
                    facts["entries_read"] += 1
                    facts["files_read"] += len(staged.files)
                    facts["bytes_read"] += staged.unpacked_bytes
                    cache.read.update({rel: stamp(live / rel) for rel in staged.files})
                    facts["warm"] = facts["files_read"] > 0
            finally:
                shutil.rmtree(staged.staging, ignore_errors=True)
            spent += staged.stream_bytes
            present.update(staged.files)
        # Broad on purpose: EntryError, or the store's (boto3, the file system); either
        # way only this entry is skipped.
        except Exception as exc:
            with budget.commit():
                facts["entries_skipped"] += 1
                if isinstance(exc, EntryWithdrawn):
                    facts["entries_withdrawn"] += 1
                skipped.append(name)
                if len(skipped) <= NAMED_SKIPS:
                    cache._warn(
                        f"shared compile cache entry {store.where.rstrip('/')}/"
                        f"{printable(name)} was skipped: {exc}. What it held is compiled again."
                    )
    if len(skipped) > NAMED_SKIPS:
        with budget.commit():
            cache._warn(
                f"{len(skipped) - NAMED_SKIPS} more shared compile cache entries at "
                f"{store.where} were skipped (the first {NAMED_SKIPS} are named above)"
            )


def _apply_redis(cache: SharedCache, found: RedisFound) -> None:
    """Put what :func:`~.redis_cache.open_redis` found into the job's shared cache."""
    if found.remote_cache is not None:
        cache.facts["remote_cache"] = found.remote_cache
    if found.budget_hit:
        cache.facts["read_budget_hit"] = True
    if found.remote_cache:
        cache.facts["warm"] = found.warm
        cache.facts["signed"] = found.signed
        if found.not_before is not None:
            cache.facts["not_before"] = format_moment(found.not_before)
    cache.environment.update(found.environment)
    for warning in found.warnings:
        cache._warn(warning)


def open_shared_cache(
    uri: str,
    *,
    compat: CompatSet,
    engine: str,
    live: Path,
    environ: Mapping[str, str],
    remote_job: bool,
    gpu: bool = False,
    timeout_s: float = DEFAULT_TIMEOUT_S,
    insecure: bool = False,
    writer: bool = True,
) -> SharedCache:
    """Read the shared cache at ``uri`` into ``live``; the job's extra environment and facts.

    Takes at most ``timeout_s`` of wall-clock time. Raises
    :class:`~trcomp.contract.errors.SharedCacheError` for a location the job
    must not trust (another account's or a public bucket, a directory others
    can write, a remote job's Redis without TLS or password) or a malformed
    setting; every other problem is a warning and the job compiles cold.
    """
    location = parse_location(uri)
    refuse_keyless_team_cache(location, environ, insecure=insecure, where="in the job")
    cache = SharedCache(
        location=location, compat=compat, store=None, timeout_s=timeout_s, writer=writer
    )
    cache.facts.update(location=location.shown, kind=location.kind, key=compat.key, warm=False)
    if location.kind == "redis":
        found = open_redis(
            location,
            engine,
            environ,
            remote_job=remote_job,
            gpu=gpu,
            insecure=insecure,
            timeout_s=timeout_s,
        )
        _apply_redis(cache, found)
        return cache
    limit = read_limit(environ)  # a malformed limit fails the job before anything is read
    if engine == "jax":
        # JAX's own XLA sub-caches put the cache dir's path into every key; off, the
        # keys are the same whatever path the cache is reached through.
        cache.environment.update(
            JAX_COMPILATION_CACHE_DIR=os.path.realpath(live / "jax"),
            JAX_PERSISTENT_CACHE_ENABLE_XLA_CACHES="none",
        )
    cache.facts.update(entries_read=0, entries_skipped=0, files_read=0, bytes_read=0)
    budget = Budget(timeout_s, name="trcomp-shared-read")
    done, _ = budget.run(lambda: _open_and_read(cache, live, environ, limit, budget))
    if not done:
        cache.facts["read_budget_hit"] = True
        cache._warn(
            f"reading shared_cache {location.shown} took more than shared_cache_timeout_s="
            f"{timeout_s:g}; the job starts with the {cache.facts['entries_read']} entries read "
            "by then and compiles the rest. Check the store, or raise shared_cache_timeout_s."
        )
    return cache
