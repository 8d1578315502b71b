"""Redis values are covered by the team's key: signed when stored, checked when read.

Against a real ``redis-server`` with a password and TLS. The attacker holds the Redis
password but not the key: they rewrite a value with a raw redis-py client, copy a
signed value under another key name, or run a job without the key. Each time the
keyed job's guarded lookup (inductor's own ``RedisRemoteCacheBackend``, wrapped as the
start-up hook wraps it) is a miss, counted, never the attacker's bytes. Before, every
one of them was handed to inductor, which unpickles FX-graph entries.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.helpers.aws import aws_environment, moto_server
from tests.helpers.redis_server import RedisServer, redis_server
from trcomp.contract.env import REDIS_URL_ENV
from trcomp.contract.shared_cache import KEY_ENV, KEY_SECRET_ENV, PREVIOUS_KEY_ENV
from trcomp_container.caching.compat import compat_set
from trcomp_container.caching.shared import SharedCache, open_shared_cache
from trcomp_container.inprocess.redis_handoff import RedisHandoff

COMPAT = compat_set(engine="inductor", gpu_listing=None)
PASSWORD = "redis-pw-9d2a71"
KEY = "current-team-key-0123456789abcdef"
OLD_KEY = "previous-team-key-fedcba9876543210"
NAME = "pt2:trcomp-signing::graph-1:c1"


@pytest.fixture(scope="module")
def tls_redis(tmp_path_factory) -> Iterator[RedisServer]:
    with redis_server(tmp_path_factory.mktemp("redis"), password=PASSWORD, tls=True) as server:
        yield server


@pytest.fixture
def raw(tls_redis) -> Iterator[Any]:
    """The attacker's client: the Redis password, no key. Empties the server first."""
    import redis

    client = redis.Redis.from_url(tls_redis.url, password=PASSWORD, ssl_ca_certs=tls_redis.ca_certs)
    client.flushall()
    yield client
    client.close()


def _job(tls_redis: RedisServer, tmp_path: Path, **keys: str) -> SharedCache:
    """What a job's entrypoint found: the training processes' variables, in ``environment``."""
    environ = {"TRCOMP_REDIS_PASSWORD": PASSWORD, "TRCOMP_REDIS_CA_CERTS": tls_redis.ca_certs}
    environ.update(keys)
    cache = open_shared_cache(
        tls_redis.url, compat=COMPAT, engine="inductor", live=tmp_path / "live",
        environ=environ, remote_job=True, timeout_s=30, insecure=KEY_ENV not in keys,
    )  # fmt: skip
    assert cache.facts["remote_cache"] is True, cache.warnings
    return cache


@contextlib.contextmanager
def training_process(environment: dict[str, str]) -> Iterator[tuple[Any, Any]]:
    """Inductor's Redis backend in a process with the job's variables, guarded as the
    start-up hook guards it; yields the backend and the guard."""
    from torch._inductor import remote_cache

    from trcomp_container.inprocess.patches import redis_backend

    handoff = RedisHandoff.from_env(environment)
    guard = redis_backend.RedisGuard(lambda message: None, handoff=handoff)
    undo = redis_backend.install(remote_cache, guard)
    assert undo is not None
    try:
        yield remote_cache.RedisRemoteCacheBackend("trcomp-signing"), guard
    finally:
        undo()


def test_a_value_rewritten_in_redis_is_a_miss_and_counted(tls_redis, raw, tmp_path):
    keyed = _job(tls_redis, tmp_path, **{KEY_ENV: KEY})
    assert keyed.facts["signed"] is True
    with training_process(keyed.environment) as (backend, guard):
        backend.put(NAME, b"compiled graph")
        stored = raw.get(NAME)
        assert stored != b"compiled graph" and stored.endswith(b"compiled graph")  # signed
        assert backend.get(NAME) == b"compiled graph" and guard.refused == 0

        raw.set(NAME, b"attacker's graph")  # other bytes altogether
        assert backend.get(NAME) is None  # was b"attacker's graph"
        raw.set(NAME, stored[: -len(b"compiled graph")] + b"attacker's graph")  # header kept
        assert backend.get(NAME) is None
        assert guard.refused == 2
        warning = guard.refused_warning()
    assert warning is not None and warning.startswith("2 value(s)")


def test_a_value_a_keyless_job_wrote_is_a_miss_for_a_keyed_job(tls_redis, raw, tmp_path):
    keyless = _job(tls_redis, tmp_path / "a")
    assert keyless.facts["signed"] is False and KEY_ENV not in keyless.environment
    with training_process(keyless.environment) as (backend, guard):
        backend.put(NAME, b"unsigned graph")
        assert raw.get(NAME) == b"unsigned graph"  # stored as before, without a key
        assert backend.get(NAME) == b"unsigned graph"  # and read as before

    keyed = _job(tls_redis, tmp_path / "b", **{KEY_ENV: KEY})
    with training_process(keyed.environment) as (backend, guard):
        assert backend.get(NAME) is None  # was b"unsigned graph"
        assert guard.refused == 1
        backend.put(NAME, b"signed graph")
    with training_process(keyless.environment) as (backend, guard):
        assert backend.get(NAME) == b"signed graph"  # the signature taken off, unchecked


def test_a_value_signed_with_the_previous_key_is_read_while_keys_rotate(tls_redis, raw, tmp_path):
    old = _job(tls_redis, tmp_path / "old", **{KEY_ENV: OLD_KEY})
    with training_process(old.environment) as (backend, _):
        backend.put(NAME, b"graph of the old key")

    rotating = _job(tls_redis, tmp_path / "both", **{KEY_ENV: KEY, PREVIOUS_KEY_ENV: OLD_KEY})
    assert rotating.environment[PREVIOUS_KEY_ENV] == OLD_KEY
    with training_process(rotating.environment) as (backend, guard):
        assert backend.get(NAME) == b"graph of the old key"
        backend.put(NAME, b"graph of the new key")  # signed with the current key only

    new = _job(tls_redis, tmp_path / "new", **{KEY_ENV: KEY})
    with training_process(new.environment) as (backend, guard):
        assert backend.get(NAME) == b"graph of the new key"
    with training_process(old.environment) as (backend, guard):
        assert backend.get(NAME) is None  # the new key's value, for a job holding the old only
        assert guard.refused == 1


def test_a_signed_value_copied_to_another_key_name_is_a_miss(tls_redis, raw, tmp_path):
    keyed = _job(tls_redis, tmp_path, **{KEY_ENV: KEY})
    other = "pt2:trcomp-signing::graph-2:c1"
    with training_process(keyed.environment) as (backend, guard):
        backend.put(NAME, b"graph one")
        raw.set(other, raw.get(NAME))
        assert backend.get(NAME) == b"graph one"
        assert backend.get(other) is None and guard.refused == 1  # was b"graph one"


def test_the_key_reaches_the_training_processes_from_its_secret_and_torch_never_dumps_it(
    tls_redis, tmp_path, monkeypatch
):
    """A SageMaker job names the key's secret: the entrypoint reads it and hands the key to
    the training processes under a name torch's repro dump (every variable whose name
    holds TORCH, INDUCTOR, DYNAMO or TRITON) leaves out."""
    import boto3
    from torch._dynamo.debug_utils import generate_env_vars_string

    with moto_server(tmp_path) as moto, aws_environment(moto.url):
        arn = boto3.client("secretsmanager").create_secret(Name="key", SecretString=KEY)["ARN"]
        aws = {k: os.environ[k] for k in ("AWS_ENDPOINT_URL", "AWS_REGION")}
        cache = _job(tls_redis, tmp_path, **{KEY_SECRET_ENV: arn}, **aws)
    assert cache.environment[KEY_ENV] == KEY and cache.facts["signed"] is True
    assert KEY not in str(cache.facts) and KEY not in " ".join(cache.warnings)
    for name, value in cache.environment.items():
        monkeypatch.setenv(name, value)
    dumped = generate_env_vars_string()
    assert KEY not in dumped and REDIS_URL_ENV in cache.environment


def test_the_training_process_record_counts_the_refused_values_in_one_warning(
    tls_redis, raw, tmp_path
):
    """The start-up hook in a real child process: three rewritten values, three misses,
    one warning naming them and the count in the record (and so in summary.json)."""
    from tests.helpers.hook import run_hooked
    from trcomp_container import summary

    keyed = _job(tls_redis, tmp_path, **{KEY_ENV: KEY})
    for n in range(3):
        raw.set(f"{NAME}-{n}", b"attacker's graph")
    code = (
        "import torch._dynamo\n"
        "from torch._inductor import remote_cache\n"
        "backend = remote_cache.RedisRemoteCacheBackend('trcomp-signing')\n"
        f"print('got', [backend.get({NAME!r} + f'-{{n}}') for n in range(3)])\n"
    )
    child = run_hooked(tmp_path, code, extra_env=keyed.environment, fork=True)
    assert child.returncode == 0, child.stderr[-3000:]
    assert "got [None, None, None]" in child.stdout  # was the attacker's bytes, three times
    (rank,) = summary.read_rank_records(tmp_path / "ranks")
    warned = [w for w in rank.warnings if "no valid signature" in w]
    assert len(warned) == 1 and warned[0].startswith("3 value(s)"), rank.warnings
    assert rank.compile is not None and rank.compile.cache is not None
    assert rank.compile.cache.redis_values_refused == 3
    built = summary.build_summary([rank], job={}, warnings=rank.warnings)
    assert built["ranks"][0]["compile_cache"]["redis_values_refused"] == 3
    assert KEY not in "".join(p.read_text() for p in (tmp_path / "ranks").iterdir())
