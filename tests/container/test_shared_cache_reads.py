"""What reading the shared compile cache may cost, and where it reads from.

Real archives (written by hand where an attacker would), real directories and
symbolic links. An entry's decompressed tar stream counts against the read limit
byte for byte, headers included.
"""

from __future__ import annotations

import gzip
import hashlib
import io
import json
import tarfile
import tracemalloc
from pathlib import Path

import pytest

from trcomp_container.caching.compat import compat_set
from trcomp_container.caching.entry import entry_name
from trcomp_container.caching.shared import open_shared_cache

KEY = "team-a-key-0123456789abcdef"
COMPAT = compat_set(engine="inductor", gpu_listing=None)
LIMIT = 1 << 20


def _open(uri: str, live: Path, key: str | None = None, **kwargs):
    environ = dict(kwargs.pop("environ", {}))
    if key:
        environ["TRCOMP_SHARED_CACHE_KEY"] = key
    return open_shared_cache(
        uri, compat=COMPAT, engine="inductor", live=live, environ=environ, remote_job=False,
        **kwargs,
    )  # fmt: skip


def _files(live: Path) -> list[Path]:
    return [p for p in live.rglob("*") if p.is_file()] if live.exists() else []


def _header(name: str, size: int, kind: bytes = tarfile.REGTYPE) -> bytes:
    info = tarfile.TarInfo(name)
    info.size, info.type = size, kind
    return info.tobuf(format=tarfile.USTAR_FORMAT)


def _pad(size: int) -> bytes:
    return b"\0" * (-size % tarfile.BLOCKSIZE)


def _long_name_entry(store: Path, name_bytes: int, kind: str) -> Path:
    """A signed entry whose one file's name takes ``name_bytes`` in a GNU long-name or a pax
    header, streamed into gzip 1 MiB at a time (the name is never whole in memory here)."""
    manifest = json.dumps({"format": 1, "key": COMPAT.key, "files": {"g": 1}}).encode()
    buffer = io.BytesIO()
    with gzip.GzipFile(fileobj=buffer, mode="wb", compresslevel=1) as out:
        out.write(_header("manifest.json", len(manifest)) + manifest + _pad(len(manifest)))
        if kind == "gnu":
            head, tail = b"files/", b"\0"
        else:  # one pax record, "<its length> path=<name>\n"
            record = len(b" path=files/") + name_bytes + 1
            digits = len(str(record))
            digits = len(str(record + digits))
            head, tail = f"{record + digits} path=files/".encode(), b"\n"
        body = len(head) + name_bytes + len(tail)
        special = tarfile.GNUTYPE_LONGNAME if kind == "gnu" else tarfile.XHDTYPE
        name = "././@LongLink" if kind == "gnu" else "././@PaxHeader"
        out.write(_header(name, body, special) + head)
        for _ in range(name_bytes >> 20):
            out.write(b"a" * (1 << 20))
        out.write(tail + _pad(body))
        out.write(_header("files/g", 1) + b"x" + _pad(1) + b"\0" * tarfile.RECORDSIZE)
    data = buffer.getvalue()
    store.mkdir(parents=True, exist_ok=True)
    path = store / entry_name(hashlib.sha256(data).hexdigest(), COMPAT.key, KEY.encode())
    path.write_bytes(data)
    return path


class _CountingGzip(gzip.GzipFile):
    """gzip as the cache uses it, counting the decompressed bytes it hands out."""

    handed_out = 0

    def read(self, size: int | None = -1) -> bytes:
        data = super().read(size)
        _CountingGzip.handed_out += len(data)
        return data


@pytest.mark.parametrize("kind", ["gnu", "pax"])
def test_a_huge_name_header_counts_against_the_read_limit(tmp_path, monkeypatch, kind):
    """A signed 64 KiB entry whose member name is 64 MiB (a GNU long name, a pax path): the
    job reads at most the limit of its decompressed stream, headers included, and refuses
    it with nothing unpacked."""
    planted = _long_name_entry(tmp_path / "shared" / COMPAT.key, 64 << 20, kind)
    assert planted.stat().st_size < 1 << 20
    monkeypatch.setattr(gzip, "GzipFile", _CountingGzip)
    monkeypatch.setattr(_CountingGzip, "handed_out", 0)
    limit = {"TRCOMP_SHARED_CACHE_MAX_READ_BYTES": str(LIMIT)}
    tracemalloc.start()
    try:
        cache = _open(f"file://{tmp_path / 'shared'}", tmp_path / "r" / "live", KEY, environ=limit)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert _CountingGzip.handed_out <= LIMIT + 1, _CountingGzip.handed_out  # 64 MiB before
    assert peak < 8 * LIMIT, peak  # 268 MB before: the name as bytes, as str, in the warning
    assert cache.facts["entries_skipped"] == 1 and cache.facts["bytes_read"] == 0
    assert "unpacks to more than" in cache.warnings[0] and len(cache.warnings[0]) < 1000
    assert _files(tmp_path / "r" / "live") == []
