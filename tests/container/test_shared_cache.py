"""The shared compile cache's entries: written whole, read back, bad ones skipped.

Real archives in a real directory and a moto S3 server; no compiler runs here
(tests/container/test_shared_cache_jobs.py runs real jobs).
"""

from __future__ import annotations

import json
import tarfile
from pathlib import Path

import pytest

from tests.helpers.aws import ACCOUNT, OTHER_ACCOUNT, aws_environment, create_bucket, moto_server
from trcomp.contract.errors import SharedCacheError
from trcomp.contract.shared_cache import check_bucket_owner, parse_location
from trcomp_container.caching.compat import compat_set, gpu_models
from trcomp_container.caching.entry import files_of
from trcomp_container.caching.shared import open_shared_cache
from trcomp_container.caching.stores import DirectoryStore, S3Store


def _live_with(tmp: Path, files: dict[str, bytes]) -> Path:
    live = tmp / "live"
    for name, body in files.items():
        (live / name).parent.mkdir(parents=True, exist_ok=True)
        (live / name).write_bytes(body)
    return live


def _open(uri: str, live: Path, engine: str = "inductor", **kwargs):
    compat = kwargs.pop("compat", None) or compat_set(engine=engine, gpu_listing=None)
    kwargs.setdefault("insecure", True)  # keyless S3 and Redis: shared_cache_insecure=True
    return open_shared_cache(
        uri, compat=compat, engine=engine, live=live, environ={}, remote_job=False, **kwargs
    )


def test_an_entry_round_trips_and_only_new_or_changed_files_are_written_again(tmp_path):
    uri = f"file://{tmp_path / 'shared'}"
    first = _live_with(tmp_path / "a", {"inductor/fxgraph/ab/g1": b"graph", "triton/K/k.so": b"k"})
    (first / "inductor" / "locks").mkdir()
    (first / "inductor" / "locks" / "x.lock").write_text("")
    cache = _open(uri, first)
    assert cache.facts["entries_found"] == 0 and cache.warm is False
    facts = cache.finish(first, succeeded=True)
    assert facts["files_written"] == 2 and facts["bytes_written"] > 0

    second = tmp_path / "b" / "live"
    cache = _open(uri, second)
    assert cache.warm is True
    assert (cache.facts["entries_read"], cache.facts["files_read"]) == (1, 2)
    assert (second / "inductor/fxgraph/ab/g1").read_bytes() == b"graph"
    assert not (second / "inductor" / "locks").exists()
    assert cache.finish(second, succeeded=True)["files_written"] == 0  # nothing new

    third = tmp_path / "c" / "live"
    cache = _open(uri, third)
    (third / "inductor/fxgraph/ab/g1").write_bytes(b"graph, updated")  # e.g. a PGO state
    (third / "inductor/fxgraph/cd").mkdir(parents=True)
    (third / "inductor/fxgraph/cd/g2").write_bytes(b"new")
    assert cache.finish(third, succeeded=True)["files_written"] == 2
    store = DirectoryStore(tmp_path / "shared" / cache.compat.key)
    assert len(store.names()) == 2
    assert not [p for p in (tmp_path / "shared").rglob("*") if ".partial-" in p.name]


def test_a_failed_job_shares_nothing(tmp_path):
    live = _live_with(tmp_path, {"inductor/g": b"x"})
    cache = _open(f"file://{tmp_path / 'shared'}", live)
    facts = cache.finish(live, succeeded=False)
    assert facts["files_written"] == 0 and "failed" in facts["not_written"]


@pytest.mark.parametrize("damage", ["truncate", "flip"])
def test_a_damaged_entry_is_skipped_with_a_warning(tmp_path, damage):
    uri = f"file://{tmp_path / 'shared'}"
    live = _live_with(tmp_path / "a", {"inductor/g": b"x" * 5000})
    cache = _open(uri, live)
    cache.finish(live, succeeded=True)
    (entry,) = (tmp_path / "shared" / cache.compat.key).iterdir()
    body = bytearray(entry.read_bytes())
    if damage == "truncate":
        del body[len(body) // 2 :]
    else:
        body[len(body) // 2] ^= 0xFF
    entry.write_bytes(bytes(body))

    reader = tmp_path / "b" / "live"
    cache = _open(uri, reader)
    assert cache.facts["entries_skipped"] == 1 and cache.facts["files_read"] == 0
    assert cache.warm is False
    (warning,) = cache.warnings
    assert entry.name in warning and "truncated or damaged" in warning
    assert not [p for p in reader.rglob("*") if p.is_file()]


def test_an_entry_of_another_compatibility_set_is_never_loaded(tmp_path):
    uri = f"file://{tmp_path / 'shared'}"
    other = compat_set(engine="inductor", gpu_listing="GPU 0: NVIDIA A10G (UUID: GPU-1)")
    mine = compat_set(engine="inductor", gpu_listing=None)
    assert other.key != mine.key and "NVIDIA_A10G" in other.key
    live = _live_with(tmp_path / "a", {"inductor/g": b"x"})
    _open(uri, live, compat=other).finish(live, succeeded=True)
    cache = _open(uri, tmp_path / "b" / "live", compat=mine)
    assert cache.facts["entries_found"] == 0 and cache.warm is False  # another prefix
    # Even an entry moved under this set's prefix is refused by its manifest.
    (entry,) = (tmp_path / "shared" / other.key).iterdir()
    assert list((tmp_path / "shared" / mine.key).iterdir()) == []  # made, kept empty, by the read
    entry.rename(tmp_path / "shared" / mine.key / entry.name)
    cache = _open(uri, tmp_path / "c" / "live", compat=mine)
    assert cache.facts["entries_skipped"] == 1
    assert "another compatibility set" in cache.warnings[0]


def test_an_entry_cannot_write_outside_the_cache(tmp_path):
    uri = f"file://{tmp_path / 'shared'}"
    compat = compat_set(engine="inductor", gpu_listing=None)
    store = tmp_path / "shared" / compat.key
    store.mkdir(parents=True)
    evil = tmp_path / "evil.tar.gz"
    manifest = json.dumps({"format": 1, "key": compat.key, "files": {"../x": 1}}).encode()
    (tmp_path / "manifest.json").write_bytes(manifest)
    (tmp_path / "x").write_bytes(b"!")
    with tarfile.open(evil, "w:gz") as tar:
        tar.add(tmp_path / "manifest.json", arcname="manifest.json")
        tar.add(tmp_path / "x", arcname="files/../x")
    import hashlib

    digest = hashlib.sha256(evil.read_bytes()).hexdigest()
    evil.rename(store / f"20260101T000000Z-{digest}.tar.gz")
    cache = _open(uri, tmp_path / "b" / "live", compat=compat)
    assert cache.facts["entries_skipped"] == 1 and "outside the cache" in cache.warnings[0]
    assert not (tmp_path / "b" / "x").exists()


def test_the_compatibility_set_names_versions_and_the_gpu_model():
    facts = compat_set(engine="inductor", gpu_listing="GPU 0: NVIDIA H100 80GB HBM3 (UUID: GPU-a)")
    assert facts["torch"] == "2.9.0" and facts["triton"] and facts["cuda"]
    assert facts["device"] == "NVIDIA H100 80GB HBM3" and facts["trcomp"]
    assert gpu_models("GPU 0: NVIDIA A10G (UUID: GPU-1)\nGPU 1: NVIDIA A10G (UUID: GPU-2)") == [
        "NVIDIA A10G"
    ]
    assert compat_set(engine="jax", gpu_listing=None).key != facts.key


@pytest.mark.parametrize(
    ("uri", "says"),
    [
        ("https://bucket/x", "no supported scheme"),
        ("s3://My_Bucket/x", "not an S3 bucket name"),
        ("s3://bucket//x", "empty, '.' or '..' segment"),
        ("file://relative/path", "three slashes"),
        ("file:///a/../b", "absolute path"),
        ("redis://cache-host", "needs a host and a port"),
        ("redis://:secret@cache-host:6379/x", "database number"),
        ("redis://cache-host:0", "needs a host and a port"),
        ("file:///tmp/cache\x00/x", "control or format character U+0000"),
        ("s3://bucket/team\u202e/cache", "control or format character U+202E"),
    ],
)
def test_a_location_that_cannot_work_is_refused_with_what_to_write(uri, says):
    with pytest.raises(ValueError, match="shared_cache") as caught:
        parse_location(uri)
    assert says in str(caught.value)
    assert "secret" not in str(caught.value)


@pytest.mark.parametrize(
    "uri",
    [
        "redis://:hunter2pw@cache-host:6379/0",
        "rediss://u:hunter2pw@h:1",
        "rediss://alice%3Ahunter2pw@cache-host:6379",  # in the user name
    ],
)
def test_a_redis_password_in_the_uri_is_refused_and_never_shown(uri):
    with pytest.raises(ValueError, match="holds a") as caught:
        parse_location(uri)
    assert "hunter2pw" not in str(caught.value) and "TRCOMP_REDIS_PASSWORD" in str(caught.value)
    location = parse_location("rediss://ci-user@cache-host:6379/2")
    assert (location.host, location.port, location.db) == ("cache-host", 6379, 2)
    assert location.tls and location.username == "ci-user"


@pytest.fixture(scope="module")
def moto(tmp_path_factory):
    with moto_server(tmp_path_factory.mktemp("moto")) as server:
        yield server


def test_s3_entries_carry_the_expected_bucket_owner_and_a_foreign_bucket_is_refused(moto, tmp_path):
    import boto3

    with aws_environment(moto.url):
        create_bucket("team-cache")
        create_bucket("someone-elses-cache", account=OTHER_ACCOUNT)
        uri = "s3://team-cache/compile"
        live = _live_with(tmp_path / "a", {"inductor/g": b"graph"})
        cache = _open(uri, live)
        assert isinstance(cache.store, S3Store) and cache.store.account == ACCOUNT
        assert cache.finish(live, succeeded=True)["files_written"] == 1
        reader = _open(uri, tmp_path / "b" / "live")
        assert reader.facts["files_read"] == 1 and reader.warm is True

        s3_calls = [r for r in moto.requests() if "team-cache" in str(r.get("url", ""))]
        object_calls = [r for r in s3_calls if "/compile/" in str(r["url"])]
        assert object_calls, "no object request reached the server"
        for request in object_calls:
            headers = {k.lower(): v for k, v in request["headers"].items()}
            assert headers.get("x-amz-expected-bucket-owner") == ACCOUNT, request["url"]

        s3 = boto3.client("s3")
        check_bucket_owner(s3, "team-cache", ACCOUNT, where="here")
        with pytest.raises(SharedCacheError, match="not owned by the job's AWS account"):
            check_bucket_owner(s3, "someone-elses-cache", ACCOUNT, where="here")
        with pytest.raises(SharedCacheError, match="in the job"):
            _open("s3://someone-elses-cache/compile", tmp_path / "c" / "live")


def test_environment_doc_names_every_variable_the_shared_cache_sets(tmp_path):
    import re

    from trcomp.contract import shared_cache as contract
    from trcomp_container.backends.inductor import pgo_environment
    from trcomp_container.caching.redis_cache import redis_environment

    docs = Path(__file__).resolve().parents[2] / "docs" / "environment.md"
    documented = set(re.findall(r"`([A-Z][A-Z0-9_]+)`", docs.read_text()))
    jax = _open(f"file://{tmp_path / 'shared'}", tmp_path / "live", engine="jax").environment
    names = {
        *redis_environment(parse_location("redis://h:1"), gpu=True),
        *pgo_environment("s3://b/p", "train.py"),
        *jax,
        *(getattr(contract, name) for name in contract.__all__ if name.endswith("_ENV")),
    }
    assert names - documented == set()


def test_the_pgo_job_id_is_stable_per_location_and_entry_point():
    from trcomp_container.backends.inductor import pgo_environment

    one = pgo_environment("s3://bucket/team/checkpoints", "train.py")
    assert one == pgo_environment("s3://bucket/team/checkpoints", "train.py")
    assert one != pgo_environment("s3://bucket/team/checkpoints", "eval.py")
    assert one["TORCH_COMPILE_JOB_ID"].startswith("trcomp-")


def test_an_entry_leaves_out_inductors_precompiled_headers(tmp_path: Path) -> None:
    """A header of about 150 MB tied to the host's compiler: the lineage keeps it, a
    shared entry does not (its gzip alone outlasted the write budget on torch 2.14)."""
    live = tmp_path / "live"
    (live / "inductor" / "precompiled_headers").mkdir(parents=True)
    (live / "inductor" / "precompiled_headers" / "abc.h.gch").write_bytes(b"x" * 64)
    (live / "inductor" / "fxgraph").mkdir()
    (live / "inductor" / "fxgraph" / "entry").write_bytes(b"graph")
    (live / "aot").mkdir()
    (live / "aot" / "key.pt2").write_bytes(b"artifact")
    assert sorted(rel for rel, _ in files_of(live, {})) == ["aot/key.pt2", "inductor/fxgraph/entry"]
