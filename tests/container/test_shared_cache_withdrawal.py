"""Withdrawal without a new key: what the team's key signed before the team's not_before
is never read again, even when whoever kept a copy puts it back.

In process, against real directories and a real ``redis-server`` (the reading and the
Redis guard are what a job runs; a child job would add only the compiling). The
"before" entry and value are signed with the team's key at a past time, as a keyed job
wrote them then; the "after" ones are written now by the job's own code. Before this
change a deleted entry or value put back was read again: only a new key withdrew it.
"""

from __future__ import annotations

import hashlib
import io
import json
import tarfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.helpers.redis_server import RedisServer, redis_server
from trcomp.contract.env import KEY_ENV, NOT_BEFORE_ENV
from trcomp.contract.errors import SharedCacheError
from trcomp.contract.withdrawal import format_moment
from trcomp_container.caching.compat import compat_set
from trcomp_container.caching.entry import entry_name
from trcomp_container.caching.shared import SharedCache, open_shared_cache
from trcomp_container.inprocess.redis_handoff import RedisHandoff

KEY = "team-key-withdraw-0123456789abcdef"
COMPAT = compat_set(engine="inductor", gpu_listing=None)
LONG_AGO = time.time() - 7200  # when the bad entry was written
MOMENT = format_moment(time.time() - 3600)  # the team withdraws what was signed before


def _signed_entry(store: Path, members: dict[str, bytes], when: float) -> Path:
    """An entry as a keyed job wrote it at ``when``: its manifest, its files, signed."""
    manifest = {"format": 1, "key": COMPAT.key, "files": {n: len(b) for n, b in members.items()}}
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w:gz") as tar:
        for name, body in [("manifest.json", json.dumps(manifest).encode())] + [
            (f"files/{n}", b) for n, b in members.items()
        ]:
            info = tarfile.TarInfo(name)
            info.size = len(body)
            tar.addfile(info, io.BytesIO(body))
    data = buffer.getvalue()
    store.mkdir(parents=True, exist_ok=True)
    path = store / entry_name(hashlib.sha256(data).hexdigest(), COMPAT.key, KEY.encode(), when)
    path.write_bytes(data)
    return path


def _open(tmp_path: Path, live: str, **environ: str) -> SharedCache:
    return open_shared_cache(
        f"file://{tmp_path / 's'}", compat=COMPAT, engine="inductor", live=tmp_path / live,
        environ={KEY_ENV: KEY, **environ}, remote_job=False,
    )  # fmt: skip


def test_a_withdrawn_entry_put_back_is_skipped_and_one_written_after_is_read(tmp_path):
    store = tmp_path / "s" / COMPAT.key
    bad = _signed_entry(store, {"inductor/fxgraph/bad": b"planted pickle"}, LONG_AGO)
    kept = bad.read_bytes()  # whoever kept a copy
    bad.unlink()  # the team deletes it...
    writer = _open(tmp_path, "writer")
    (tmp_path / "writer" / "inductor").mkdir(parents=True)
    (tmp_path / "writer" / "inductor" / "good").write_bytes(b"compiled after the moment")
    written = writer.finish(tmp_path / "writer", succeeded=True)["entry_written"]
    bad.write_bytes(kept)  # ...and it is put back (replayed)

    before = _open(tmp_path, "no-withdrawal")  # what a keyed job read before the change
    assert (tmp_path / "no-withdrawal" / "inductor/fxgraph/bad").exists()

    reader = _open(tmp_path, "reader", **{NOT_BEFORE_ENV: MOMENT})
    facts = reader.facts
    assert facts["entries_read"] == 1 and facts["entries_skipped"] == 1, reader.warnings
    assert facts["entries_withdrawn"] == 1 and facts["not_before"] == MOMENT
    assert not (tmp_path / "reader" / "inductor/fxgraph/bad").exists()  # was unpacked
    assert (tmp_path / "reader" / "inductor/good").read_bytes() == b"compiled after the moment"
    (warning,) = reader.warnings
    assert bad.name in warning and "withdrawn: signed at" in warning and MOMENT in warning
    assert written != bad.name and before.facts["entries_read"] == 2


def test_trcomp_cache_withdraw_reaches_a_job_that_reads_its_key_from_the_secret(tmp_path):
    """The SageMaker route: the CLI writes the moment into the key's secret (moto); the
    job reads key and moment from it and skips the entry written before."""
    import os

    import boto3

    from tests.helpers.aws import aws_environment, moto_server
    from trcomp.cli import main
    from trcomp.contract.env import KEY_SECRET_ENV

    _signed_entry(tmp_path / "s" / COMPAT.key, {"inductor/bad": b"planted"}, LONG_AGO)
    _signed_entry(tmp_path / "s" / COMPAT.key, {"inductor/good": b"kept"}, time.time() - 60)
    with moto_server(tmp_path) as moto, aws_environment(moto.url):
        arn = boto3.client("secretsmanager").create_secret(Name="k", SecretString=KEY)["ARN"]
        environ = {
            KEY_SECRET_ENV: arn,
            **{k: os.environ[k] for k in ("AWS_ENDPOINT_URL", "AWS_REGION")},
        }
        before = open_shared_cache(
            f"file://{tmp_path / 's'}", compat=COMPAT, engine="inductor", live=tmp_path / "a",
            environ=environ, remote_job=False,
        )  # fmt: skip
        assert main(["cache", "withdraw", "--secret", arn, "--before", MOMENT]) == 0
        after = open_shared_cache(
            f"file://{tmp_path / 's'}", compat=COMPAT, engine="inductor", live=tmp_path / "b",
            environ=environ, remote_job=False,
        )  # fmt: skip
    assert before.facts["entries_read"] == 2 and "not_before" not in before.facts
    assert after.facts["entries_read"] == 1 and after.facts["entries_withdrawn"] == 1
    assert after.facts["not_before"] == MOMENT and KEY not in str(after.facts)
    assert (tmp_path / "b" / "inductor/good").exists()
    assert not (tmp_path / "b" / "inductor/bad").exists()


def test_a_withdrawal_moment_is_checked_like_the_key(tmp_path):
    for environ, says in [
        ({NOT_BEFORE_ENV: MOMENT, KEY_ENV: ""}, "TRCOMP_SHARED_CACHE_KEY is set but empty"),
        ({NOT_BEFORE_ENV: "2026-12-04 15:00"}, "not an ISO-8601 time with its zone"),
        ({NOT_BEFORE_ENV: " "}, "NOT_BEFORE is set but empty"),
    ]:
        with pytest.raises(SharedCacheError, match=says):
            _open(tmp_path, "live", **environ)
    with pytest.raises(SharedCacheError, match="NOT_BEFORE is set without a key"):
        open_shared_cache(
            f"file://{tmp_path / 's'}", compat=COMPAT, engine="inductor", live=tmp_path / "l",
            environ={NOT_BEFORE_ENV: MOMENT}, remote_job=False,
        )  # fmt: skip


def test_the_sdk_refuses_a_bad_withdrawal_moment_at_fit(tmp_path):
    from trcomp.contract.config import TrainingCompilerConfig
    from trcomp.shared_cache_checks import check_shared_cache

    config = TrainingCompilerConfig(backend="inductor", shared_cache=f"file://{tmp_path / 's'}")
    with pytest.raises(SharedCacheError, match="set without a key"):
        check_shared_cache(config, mode="process", environment={NOT_BEFORE_ENV: MOMENT})
    with pytest.raises(SharedCacheError, match="with its zone"):
        check_shared_cache(
            config, mode="process", environment={KEY_ENV: KEY, NOT_BEFORE_ENV: "yesterday"}
        )
    check_shared_cache(config, mode="process", environment={KEY_ENV: KEY, NOT_BEFORE_ENV: MOMENT})


# -- Redis ---------------------------------------------------------------------------------

NAME = "pt2:trcomp-withdraw::graph-1:c1"


@pytest.fixture(scope="module")
def redis(tmp_path_factory) -> Iterator[RedisServer]:
    with redis_server(tmp_path_factory.mktemp("redis")) as server:
        yield server


@pytest.fixture
def raw(redis) -> Iterator[Any]:
    """A client of the Redis (no password: anyone on its network)."""
    import redis as redis_py

    client = redis_py.Redis.from_url(redis.url)
    client.flushall()
    yield client
    client.close()


def _redis_job(redis: RedisServer, tmp_path: Path, **environ: str) -> SharedCache:
    cache = open_shared_cache(
        redis.url, compat=COMPAT, engine="inductor", live=tmp_path / "live",
        environ={KEY_ENV: KEY, **environ}, remote_job=False, timeout_s=30,
    )  # fmt: skip
    assert cache.facts["remote_cache"] is True, cache.warnings
    return cache


def _guarded(environment: dict[str, str]) -> Any:
    from torch._inductor import remote_cache

    from trcomp_container.inprocess.patches import redis_backend

    guard = redis_backend.RedisGuard(
        lambda message: None, handoff=RedisHandoff.from_env(environment)
    )
    undo = redis_backend.install(remote_cache, guard)
    assert undo is not None
    return remote_cache.RedisRemoteCacheBackend("trcomp-withdraw"), guard, undo


def test_a_withdrawn_redis_value_put_back_is_a_miss_and_one_written_after_is_read(
    redis, raw, tmp_path
):
    from trcomp_container.inprocess.patches import redis_backend

    old = redis_backend.sign(KEY.encode(), NAME, b"graph of long ago", when=int(LONG_AGO))
    raw.set(NAME, old)  # a keyed job wrote it then; the team deletes it, a copy is put back

    unwithdrawn = _redis_job(redis, tmp_path / "a")
    backend, guard, undo = _guarded(unwithdrawn.environment)
    try:
        assert backend.get(NAME) == b"graph of long ago"  # read again, before the change
    finally:
        undo()

    job = _redis_job(redis, tmp_path / "b", **{NOT_BEFORE_ENV: MOMENT})
    assert job.facts["not_before"] == MOMENT and job.environment[NOT_BEFORE_ENV] == MOMENT
    backend, guard, undo = _guarded(job.environment)
    try:
        assert backend.get(NAME) is None  # withdrawn: a miss, inductor compiles it again
        assert (guard.refused, guard.withdrawn) == (1, 1)
        backend.put(NAME, b"graph of now")  # signed now, after the moment
        assert backend.get(NAME) == b"graph of now" and guard.refused == 1
        warning = guard.withdrawn_warning()
        assert guard.refused_warning() is None
    finally:
        undo()
    assert warning is not None and warning.startswith("1 value(s)") and MOMENT in warning


def test_the_training_process_record_counts_withdrawn_values(redis, raw, tmp_path):
    """The start-up hook in a real child: the moment reaches it through the handoff, one
    value put back is withdrawn, one written after the moment is read; the record says so."""
    from tests.helpers.hook import run_hooked
    from trcomp_container import summary
    from trcomp_container.inprocess.patches import redis_backend

    job = _redis_job(redis, tmp_path, **{NOT_BEFORE_ENV: MOMENT})
    raw.set(f"{NAME}-0", redis_backend.sign(KEY.encode(), f"{NAME}-0", b"old", int(LONG_AGO)))
    raw.set(f"{NAME}-1", redis_backend.sign(KEY.encode(), f"{NAME}-1", b"new"))
    code = (
        "import torch._dynamo\n"
        "from torch._inductor import remote_cache\n"
        "backend = remote_cache.RedisRemoteCacheBackend('trcomp-withdraw')\n"
        f"print('got', [backend.get({NAME!r} + f'-{{n}}') for n in range(2)])\n"
    )
    child = run_hooked(tmp_path, code, extra_env=job.environment, fork=True)
    assert child.returncode == 0, child.stderr[-3000:]
    assert "got [None, b'new']" in child.stdout
    (rank,) = summary.read_rank_records(tmp_path / "ranks")
    assert rank.compile is not None and rank.compile.cache is not None
    assert rank.compile.cache.redis_values_withdrawn == 1
    assert rank.compile.cache.redis_values_refused == 1
    assert [w for w in rank.warnings if "withdrawn" in w] and not [
        w for w in rank.warnings if "no valid signature" in w
    ]
    built = summary.build_summary([rank], job={}, warnings=rank.warnings)
    assert built["ranks"][0]["compile_cache"]["redis_values_withdrawn"] == 1
