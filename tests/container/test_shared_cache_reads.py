"""What reading the shared compile cache may cost, and where it reads from.

Real archives (written by hand where an attacker would), real directories and
symbolic links, a moto S3 server. An entry's decompressed tar stream counts
against the read limit byte for byte, headers included; a get reads no more than
the listing showed, and stops when the read's budget ends.
"""

from __future__ import annotations

import gzip
import hashlib
import io
import json
import os
import tarfile
import threading
import tracemalloc
from pathlib import Path

import pytest

from tests.container.test_shared_cache_trust import _plant
from tests.helpers.aws import aws_environment, create_bucket, moto_server
from trcomp_container.caching.compat import compat_set
from trcomp_container.caching.entry import entry_name
from trcomp_container.caching.shared import open_shared_cache
from trcomp_container.caching.stores import DirectoryStore, EntryChanged, Listed, S3Store

KEY = "team-a-key-0123456789abcdef"
COMPAT = compat_set(engine="inductor", gpu_listing=None)
LIMIT = 1 << 20


def _open(uri: str, live: Path, key: str | None = None, **kwargs):
    environ = dict(kwargs.pop("environ", {}))
    if key:
        environ["TRCOMP_SHARED_CACHE_KEY"] = key
    # An S3 or Redis job without a key trusts the location only when opted in, as
    # TrainingCompilerConfig(shared_cache_insecure=True) does (a file:// never needs it).
    kwargs.setdefault("insecure", not key)
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


def _live_with(base: Path, files: dict[str, bytes]) -> Path:
    live = base / "live"
    for name, body in files.items():
        (live / name).parent.mkdir(parents=True, exist_ok=True)
        (live / name).write_bytes(body)
    return live


@pytest.fixture(scope="module")
def moto(tmp_path_factory):
    with moto_server(tmp_path_factory.mktemp("moto")) as server, aws_environment(server.url):
        yield server


@pytest.fixture
def s3_bytes(monkeypatch) -> list[int]:
    """The bytes read from S3 object bodies in this test (boto3's StreamingBody), in calls."""
    from botocore.response import StreamingBody

    read, counted = StreamingBody.read, []

    def counting(self: StreamingBody, amt: int | None = None) -> bytes:
        data = read(self, amt)
        counted.append(len(data))
        return data

    monkeypatch.setattr(StreamingBody, "read", counting)
    return counted


def _written_entry(bucket: str, tmp_path: Path) -> tuple[str, str]:
    """A bucket with one entry a job wrote; its URI and its object key."""
    import boto3

    create_bucket(bucket)
    uri = f"s3://{bucket}/compile"
    live = _live_with(tmp_path / "writer", {"inductor/g": b"graph"})
    assert _open(uri, live).finish(live, succeeded=True)["files_written"] == 1
    (item,) = boto3.client("s3").list_objects_v2(Bucket=bucket)["Contents"]
    return uri, item["Key"]


def test_an_s3_entry_replaced_after_the_listing_is_not_downloaded(
    moto, tmp_path, monkeypatch, s3_bytes
):
    """Listed at its size and ETag, replaced by 4 MiB before the get: refused by its ETag
    (S3's 412) with no byte of it read; before, all 4 MiB were downloaded."""
    import boto3

    uri, key = _written_entry("replaced-cache", tmp_path)
    listing = S3Store.names

    def then_replaced(self: S3Store):
        found = listing(self)
        boto3.client("s3").put_object(Bucket="replaced-cache", Key=key, Body=os.urandom(4 << 20))
        return found

    monkeypatch.setattr(S3Store, "names", then_replaced)
    cache = _open(uri, tmp_path / "r" / "live")
    assert sum(s3_bytes) == 0, sum(s3_bytes)  # 4,194,304 before
    assert cache.facts["entries_skipped"] == 1 and cache.facts["files_read"] == 0
    assert "PreconditionFailed" in cache.warnings[0], cache.warnings
    assert _files(tmp_path / "r" / "live") == []


def test_an_s3_get_reads_no_more_than_the_listed_size(moto, tmp_path, s3_bytes):
    """Without an ETag to name, the Range still holds: 1 KiB listed, 4 MiB there, 1 KiB + 1
    byte read and the entry refused."""
    import boto3

    uri, key = _written_entry("grown-cache", tmp_path)
    boto3.client("s3").put_object(Bucket="grown-cache", Key=key, Body=os.urandom(4 << 20))
    cache = _open(uri, tmp_path / "r" / "live", environ={"TRCOMP_SHARED_CACHE_MAX_READ_BYTES": "0"})
    assert isinstance(cache.store, S3Store)
    dest = tmp_path / "entry.tar.gz"
    name = key.rsplit("/", 1)[-1]
    with pytest.raises(EntryChanged, match="more than the 1,024 bytes it was listed with"):
        cache.store.get(Listed(name, 1024), dest, stop=lambda: False)
    assert sum(s3_bytes) == 1025 and dest.stat().st_size == 1025


def test_a_directory_entry_that_grew_after_the_listing_is_read_no_further(tmp_path):
    store_dir = tmp_path / "shared" / COMPAT.key
    store_dir.mkdir(parents=True)
    (store_dir / "entry.tar.gz").write_bytes(os.urandom(4 << 20))
    store = DirectoryStore(store_dir)
    with pytest.raises(EntryChanged, match="replaced since the listing"):
        store.get(Listed("entry.tar.gz", 1024), tmp_path / "dest", stop=lambda: False)
    assert (tmp_path / "dest").stat().st_size == 1025


def test_an_s3_read_stops_when_its_budget_ends(moto, tmp_path, monkeypatch, s3_bytes):
    """The read's thread, still reading when the job stopped waiting for it, reads no chunk
    after: 1 MiB of a 4 MiB entry, where it read on to the end before."""
    import boto3
    from botocore.response import StreamingBody

    create_bucket("slow-cache")
    name = entry_name("0" * 64, COMPAT.key, None)
    boto3.client("s3").put_object(
        Bucket="slow-cache", Key=f"compile/{COMPAT.key}/{name}", Body=os.urandom(4 << 20)
    )
    released = threading.Event()
    read = StreamingBody.read  # already the counting one

    def held(self: StreamingBody, amt: int | None = None) -> bytes:
        data = read(self, amt)
        released.wait(60)  # the first chunk is held until the job has stopped waiting
        return data

    monkeypatch.setattr(StreamingBody, "read", held)
    cache = _open("s3://slow-cache/compile", tmp_path / "r" / "live", timeout_s=1)
    assert cache.facts["read_budget_hit"] is True
    readers = [t for t in threading.enumerate() if t.name == "trcomp-shared-read"]
    released.set()
    for thread in readers:
        thread.join(60)
        assert not thread.is_alive()
    assert sum(s3_bytes) <= 1 << 20, sum(s3_bytes)  # 4,194,304 before
    assert _files(tmp_path / "r" / "live") == []


def test_an_s3_write_past_its_budget_never_appears(moto, tmp_path, monkeypatch):
    """The upload outlasted the write budget, then went on: no entry appears (it did before:
    the upload, once started, went to the entry's own name), and its partial object is gone."""
    import boto3

    create_bucket("write-cache")
    live = tmp_path / "w" / "live"
    (live / "inductor").mkdir(parents=True)
    (live / "inductor" / "g").write_bytes(b"graph")
    writer = _open("s3://write-cache/compile", live)  # opening on a busy machine takes > 1 s
    writer.timeout_s = 1  # the write's budget
    released, uploads = threading.Event(), []
    put = writer.store.s3.put_object

    def held(**kwargs):
        released.wait(60)  # the upload is under way when the job stops waiting for it
        uploads.append(kwargs["Key"])
        return put(**kwargs)

    monkeypatch.setattr(writer.store.s3, "put_object", held)
    facts = writer.finish(live, succeeded=True)
    assert facts["write_budget_hit"] is True and facts["files_written"] == 0
    released.set()
    for thread in threading.enumerate():  # until the abandoned write has ended
        if thread.name == "trcomp-shared-write":
            thread.join(60)
    listed = boto3.client("s3").list_objects_v2(Bucket="write-cache").get("Contents", [])
    assert uploads and [item["Key"] for item in listed] == []


def test_a_location_behind_a_symlink_is_used_where_it_was_checked(tmp_path, monkeypatch):
    """The link is repointed at a planted cache right after the job opened the location:
    the job still reads and writes the directory it checked."""
    from trcomp_container.caching import dir_store

    checked, planted = tmp_path / "team", tmp_path / "planted"
    _plant(checked / COMPAT.key, [("inductor/good", b"the team's")])
    _plant(planted / COMPAT.key, [("inductor/evil", b"planted")])
    link = tmp_path / "link"
    link.symlink_to(checked)
    open_directory = dir_store.open_directory

    def open_then_repoint(path: Path, *, where: str, create: bool = True) -> int | None:
        handle = open_directory(path, where=where, create=create)
        link.unlink()  # the location is open and checked: now the link moves
        link.symlink_to(planted)
        return handle

    monkeypatch.setattr(dir_store, "open_directory", open_then_repoint)
    live = tmp_path / "r" / "live"
    cache = _open(f"file://{link}", live)
    assert sorted(p.name for p in _files(live)) == ["good"]  # ["evil"] before
    (live / "inductor" / "new").write_bytes(b"compiled here")
    assert cache.finish(live, succeeded=True)["files_written"] == 1
    assert len(list((checked / COMPAT.key).iterdir())) == 2
    assert len(list((planted / COMPAT.key).iterdir())) == 1  # 2 before: written there too
