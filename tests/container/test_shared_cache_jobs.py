"""Done-when of the shared compile cache, with real jobs through the real entrypoint.

For S3 through a moto server and a real redis-server with a password and TLS,
a first job fills the shared cache and a second job, with another job name and
another checkpoint location, reads it; the shared directory does the same in
the three-jobs, jax and dynamic-shape jobs. Then: three jobs at once on an empty
cache, a damaged entry, a planted Redis value, a bucket of another account, a
store that hangs, a malformed read limit, the jax engine, and dynamo's
profile-guided dynamic shapes kept across jobs.

Each job is a cold compile (tens of seconds on a 2-core machine), so a job
serves every test whose check it can carry (module fixtures :func:`pairs` and
:func:`at_once`): the S3 pair's first job meets a damaged entry, the keyed Redis
job reads the plain values the keyless Redis pair left, and the three jobs at
once run the varying-length loop whose dynamic-shape decisions a fourth reads.
"""

from __future__ import annotations

import concurrent.futures
import json
import os
import shutil

import pytest

from tests.helpers import jobs
from tests.helpers.aws import OTHER_ACCOUNT, aws_environment, create_bucket, moto_server
from tests.helpers.hung_server import until_reached
from tests.helpers.redis_server import redis_server
from trcomp.config import TrainingCompilerConfig
from trcomp_container.caching.compat import compat_set
from trcomp_container.caching.shared import open_shared_cache
from trcomp_container.failures import ExitCode

# Cold compiles and the shared cache are what these jobs test: their own empty caches.
pytestmark = [pytest.mark.slow, pytest.mark.cold_compile]

LOOP_HPS = {"steps": 8}
# Generous: the 2-core test machine may be busy; the budget itself is tested with a hung store.
TIMEOUT_S = 60.0
REDIS_PASSWORD = "job-redis-pw-81b2"


@pytest.fixture(scope="module")
def services(tmp_path_factory):
    """A moto server with the team's bucket and another account's, and a redis-server."""

    tmp = tmp_path_factory.mktemp("services")
    with (
        moto_server(tmp) as moto,
        aws_environment(moto.url) as aws,
        redis_server(tmp) as redis,
        redis_server(tmp, password=REDIS_PASSWORD, tls=True) as tls_redis,
    ):
        create_bucket("team-cache")
        create_bucket("someone-elses-cache", account=OTHER_ACCOUNT)
        yield {"aws": aws, "redis": redis.url, "rediss": tls_redis, "tmp": tmp}


def _uri(kind: str, services) -> str:
    return {
        "file": f"file://{services['tmp'] / 'shared-dir'}",
        "s3": "s3://team-cache/compile-cache",
        "redis": services["redis"],
        "rediss": services["rediss"].url,
    }[kind]


def _env(kind: str, services) -> dict[str, str]:
    if kind != "rediss":
        return {}
    server = services["rediss"]
    return {"TRCOMP_REDIS_PASSWORD": server.password, "TRCOMP_REDIS_CA_CERTS": server.ca_certs}


def _job(base, name: str, config: TrainingCompilerConfig, entry_point: str = "loop.py", **env):
    run = jobs.run_job(
        base / name,
        config=config,
        entry_point=entry_point,
        hyperparameters=LOOP_HPS if entry_point == "loop.py" else {"steps": 12},
        env={"TRAINING_JOB_NAME": name, **env},
    )
    assert run.returncode == 0, run.output[-4000:]
    return run


def _config(uri: str, **fields) -> TrainingCompilerConfig:
    fields.setdefault("shared_cache_timeout_s", TIMEOUT_S)
    # Keyless S3 and Redis jobs here trust the location, as the opt-in says; a keyed job
    # (its key in env) signs and checks whatever this says.
    fields.setdefault("shared_cache_insecure", True)
    return TrainingCompilerConfig(backend="inductor", shared_cache=uri, **fields)


def _plant_damaged_entry(uri: str, tmp) -> str:
    """A truncated entry at ``uri`` (S3), by the job's own writer in this process; its name.

    What it holds is not read (it is damaged); jobs writing real entries are the pairs'.
    """
    import boto3

    live = tmp / "writer" / "live"
    (live / "inductor" / "fxgraph").mkdir(parents=True)
    (live / "inductor" / "fxgraph" / "graph").write_bytes(os.urandom(64 << 10))
    writer = open_shared_cache(
        uri,
        compat=compat_set(engine="inductor", gpu_listing=None),
        engine="inductor",
        live=live,
        environ=dict(os.environ),
        remote_job=False,
        timeout_s=TIMEOUT_S,
        insecure=True,
    )
    assert writer.finish(live, succeeded=True)["files_written"] == 1
    bucket, _, prefix = uri.removeprefix("s3://").partition("/")
    s3 = boto3.client("s3")
    listed = s3.list_objects_v2(Bucket=bucket, Prefix=prefix)["Contents"]
    (key,) = (item["Key"] for item in listed if item["Key"].endswith(".tar.gz"))
    body = s3.get_object(Bucket=bucket, Key=key)["Body"].read()
    s3.put_object(Bucket=bucket, Key=key, Body=body[: len(body) // 2])
    return key.rsplit("/", 1)[-1]


@pytest.fixture(scope="module")
def pairs(services, tmp_path_factory):
    """``pairs(kind)``: a first job on an empty shared cache of ``kind`` and a second job,
    with another job name and another checkpoint location (its own tree), once per module.

    The S3 location holds a damaged entry before the first job (:func:`_plant_damaged_entry`):
    the first job skips it and compiles cold, the second reads the first's entry.
    """
    done: dict[str, dict] = {}

    def pair(kind: str) -> dict:
        if kind not in done:
            tmp = tmp_path_factory.mktemp(f"pair-{kind}")
            uri = _uri(kind, services)
            damaged = _plant_damaged_entry(uri, tmp) if kind == "s3" else None
            config = _config(uri)
            env = _env(kind, services)
            cold = _job(tmp, f"first-{kind}", config, **env)
            warm = _job(tmp, f"second-{kind}", config, **env)
            done[kind] = {"cold": cold, "warm": warm, "damaged": damaged, "tmp": tmp}
        return done[kind]

    return pair


# Two stores as whole jobs; what differs for the other two is the store layer, checked
# in process against the same real store: a directory by
# test_shared_cache.py::test_an_entry_round_trips_and_only_new_or_changed_files_are_written_again
# (and as jobs below: three at once with dynamic shapes, jax), plain redis:// by
# test_shared_cache_stalls.py::test_a_local_jobs_plain_redis_turns_inductors_remote_caches_on.
@pytest.mark.parametrize("kind", ["s3", "rediss"])
def test_a_second_job_elsewhere_compiles_nothing_from_the_shared_cache(
    kind, pairs, record_property
):
    cold, warm = pairs(kind)["cold"], pairs(kind)["warm"]
    cold_cache, warm_cache = (run.summary["ranks"][0]["compile_cache"] for run in (cold, warm))
    assert cold_cache["fxgraph_miss"] > 0 and cold_cache["fxgraph_hit"] == 0
    assert warm_cache["fxgraph_hit"] > 0 and warm_cache["fxgraph_miss"] == 0
    assert cold.summary["cache_warm"] is False and warm.summary["cache_warm"] is True
    shared = warm.summary["shared_cache"]
    assert shared["kind"] == {"rediss": "redis"}.get(kind, kind) and shared["warm"] is True
    assert REDIS_PASSWORD not in json.dumps([cold.summary, warm.summary])
    if not kind.startswith("redis"):
        assert cold.summary["shared_cache"]["files_written"] > 0
        # Only the first job's entry is read: the damaged one is skipped again.
        assert shared["files_read"] == cold.summary["shared_cache"]["files_written"]
        assert shared["bytes_read"] > 0 and shared["files_written"] == 0
        assert shared["entries_read"] == 1 and shared["entries_skipped"] == 1
    first_steps = {run: r.metrics["first_step_s"] for run, r in (("cold", cold), ("warm", warm))}
    for name, value in first_steps.items():
        record_property(f"{kind}_{name}_first_step_s", value)
    print(f"shared cache {kind}: first step {first_steps}")  # recorded, not asserted


def test_a_damaged_entry_is_skipped_and_the_job_compiles_cold(pairs):
    # The S3 pair's first job: the location held only a truncated entry.
    s3 = pairs("s3")
    run, damaged = s3["cold"], s3["damaged"]
    assert run.summary["shared_cache"]["entries_skipped"] == 1
    assert run.summary["shared_cache"]["entries_read"] == 0
    assert run.summary["cache_warm"] is False
    assert any(damaged in w and "truncated" in w for w in run.summary["warnings"])
    assert run.summary["ranks"][0]["compile_cache"]["fxgraph_miss"] > 0


def test_a_planted_redis_value_is_a_miss_a_keyed_job_counts_in_its_summary(pairs, services):
    """Someone with the Redis password but not the key plants values (here the real,
    loadable compiled graphs a keyless job stored: the rediss pair's): a keyed job compiles
    each graph again instead of loading them, counts them in its summary, and stores its
    own values signed (before, the values went to inductor unchecked)."""
    import redis

    key = "job-team-key-5e0c7a9d3b1f4e26"
    server = services["rediss"]
    env = {**_env("rediss", services), "TRCOMP_SHARED_CACHE_KEY": key}
    rediss = pairs("rediss")
    tmp = rediss["tmp"]
    client = redis.Redis.from_url(
        server.url, password=server.password, ssl_ca_certs=server.ca_certs
    )
    try:
        planted = {name: client.get(name) for name in client.scan_iter("pt2:*")}
        assert planted and not any(v.startswith(b"trcomp-redis-value/") for v in planted.values())
        # With debug=True: torch writes its repro scripts and trace logs into the job's output.
        keyed = _job(tmp, "keyed", _config(server.url, debug=True), **env)
        after = {name: client.get(name) for name in client.scan_iter("pt2:*")}
        # Every value it stored (new, or over a planted one) it stored signed.
        stored = [value for name, value in after.items() if planted.get(name) != value]
        assert stored and all(value.startswith(b"trcomp-redis-value/2") for value in stored)
    finally:
        client.flushall()  # the next Redis job starts empty
        client.close()
    assert keyed.summary["shared_cache"]["signed"] is True
    cache = keyed.summary["ranks"][0]["compile_cache"]
    assert cache["redis_values_refused"] > 0 and cache["fxgraph_hit"] == 0, cache
    warned = [w for w in keyed.summary["warnings"] if "no valid signature" in w]
    assert len(warned) == 1 and warned[0].startswith(f"{cache['redis_values_refused']} value")
    assert key not in json.dumps(keyed.summary) + keyed.output
    # No file the three Redis jobs left holds the key or the Redis password (debug dumps
    # included).
    files = [path for path in tmp.rglob("*") if path.is_file()]
    assert any(path.name == "fx_graph_runnable.py" for path in files), "no debug dumps"
    secrets = [key.encode(), server.password.encode()]
    holding = [path for path in files if any(secret in path.read_bytes() for secret in secrets)]
    assert not holding, holding
    print(f"refused: {cache}")  # recorded in the commit


@pytest.fixture(scope="module")
def at_once(tmp_path_factory):
    """Three jobs of the varying-length loop at once on an empty shared directory, then
    a fourth job reading what they wrote."""
    tmp = tmp_path_factory.mktemp("at-once")
    uri = f"file://{tmp / 'empty-shared'}"
    config = _config(uri)
    with concurrent.futures.ThreadPoolExecutor(3) as pool:
        runs = list(
            pool.map(lambda i: _job(tmp, f"at-once-{i}", config, entry_point="varlen.py"), range(3))
        )
    # What the three wrote, read before the fourth job adds to it.
    reader = open_shared_cache(
        uri,
        compat=compat_set(engine="inductor", gpu_listing=None),
        engine="inductor",
        live=tmp / "reader" / "live",
        environ={},
        remote_job=False,
        timeout_s=TIMEOUT_S,
    )
    after = _job(tmp, "after", config, entry_point="varlen.py")
    return {"runs": runs, "reader": reader.facts, "after": after}


def test_three_jobs_at_once_on_an_empty_shared_cache_all_succeed(at_once):
    facts = [run.summary["shared_cache"] for run in at_once["runs"]]
    # A job that started after another had written may find its entry and add nothing.
    assert all(f["files_written"] > 0 or f["files_read"] > 0 for f in facts), facts
    written = [f for f in facts if f.get("entry_written")]
    assert written and not any(f.get("write_budget_hit") for f in facts)
    # Every entry they wrote is whole: a reader takes them all, skips none.
    reader = at_once["reader"]
    assert reader["entries_found"] == len(written)
    assert reader["entries_read"] == len(written) and reader["entries_skipped"] == 0


def test_a_bucket_of_another_account_fails_the_job_before_the_script_runs(services, tmp_path):
    config = TrainingCompilerConfig(
        backend="inductor", shared_cache="s3://someone-elses-cache/compile",
        shared_cache_insecure=True,
    )  # fmt: skip
    run = jobs.run_job(tmp_path, config=config, entry_point="loop.py", hyperparameters=LOOP_HPS)
    assert run.returncode == ExitCode.CONFIG
    assert "not owned by the job's AWS account" in (run.failure or "")
    assert not (tmp_path / "model" / "loss.json").exists()  # the script never ran


def test_a_hung_store_delays_a_job_by_at_most_the_budget(services, tmp_path):
    def attempt(port: int, budget: float):
        config = _config("s3://team-cache/hung", shared_cache_timeout_s=budget)
        endpoint = f"http://127.0.0.1:{port}"
        return _job(tmp_path / f"{budget:g}", "hung-s3", config, AWS_ENDPOINT_URL=endpoint)

    run, budget = until_reached(attempt, budgets=(2, 8, 20))
    shared = run.summary["shared_cache"]
    assert shared["read_budget_hit"] is True and shared["entries_read"] == 0
    assert run.summary["cache_warm"] is False and "files_written" not in shared
    assert any(f"shared_cache_timeout_s={budget:g}" in w for w in run.summary["warnings"])


def test_a_malformed_read_limit_fails_the_job_with_the_config_error(services, tmp_path):
    config = _config(_uri("file", services))
    run = jobs.run_job(
        tmp_path,
        config=config,
        entry_point="loop.py",
        hyperparameters=LOOP_HPS,
        env={"TRCOMP_SHARED_CACHE_MAX_READ_BYTES": "4GiB"},
    )
    assert run.returncode == ExitCode.CONFIG
    assert "TRCOMP_SHARED_CACHE_MAX_READ_BYTES='4GiB'" in (run.failure or "")
    assert not (tmp_path / "model" / "loss.json").exists()  # the script never ran


def test_the_jax_engine_reads_its_programs_from_the_shared_cache(services, tmp_path):
    # A shared directory only: S3 moves the same entries (the S3 job above; in process,
    # test_s3_entries_carry_the_expected_bucket_owner_and_a_foreign_bucket_is_refused).
    config = TrainingCompilerConfig(
        backend="xla",
        xla_engine="jax",
        shared_cache=_uri("file", services) + "-jax",
        shared_cache_timeout_s=TIMEOUT_S,
    )
    pytest.importorskip("torchax")
    cold = _job(tmp_path, "jax-first", config, entry_point="jax_loop.py")
    warm = _job(tmp_path, "jax-second", config, entry_point="jax_loop.py")
    assert cold.summary["ranks"][0]["jax"]["programs_from_cache"] == 0
    assert warm.summary["ranks"][0]["jax"]["programs_from_cache"] == 2
    assert warm.summary["cache_warm"] is True
    assert warm.summary["shared_cache"]["files_read"] > 0


def test_a_second_job_of_a_varying_length_loop_recompiles_less(tmp_path):
    """Dynamo's PGO state, kept with the lineage's cache under a stable TORCH_COMPILE_JOB_ID."""
    config = TrainingCompilerConfig(backend="inductor")
    lineage = {"TRCOMP_CHECKPOINT_URI": "s3://bucket/team/checkpoints"}
    first = _job(tmp_path, "pgo-first", config, entry_point="varlen.py", **lineage)
    # The next job of the lineage gets the same checkpoints, as SageMaker's sync gives them.
    shutil.copytree(tmp_path / "pgo-first" / "checkpoints", tmp_path / "pgo-second" / "checkpoints")
    second = _job(tmp_path, "pgo-second", config, entry_point="varlen.py", **lineage)
    first_recompiles = first.metrics["recompiles"]
    assert first_recompiles >= 1  # the length changed: a recompile with it dynamic
    assert second.metrics["recompiles"] < first_recompiles
    assert list((tmp_path / "pgo-second" / "checkpoints").rglob("dynamo/code_state_trcomp-*"))


def test_dynamic_shape_decisions_travel_through_the_shared_cache(at_once):
    """The PGO state under the shared location's job id: another checkpoint location, same gain.

    The first jobs are the three at once (those that read nothing compiled cold)."""
    cold = [r for r in at_once["runs"] if r.summary["shared_cache"]["entries_read"] == 0]
    assert cold  # the first to start found the directory empty
    assert all(first.metrics["recompiles"] >= 1 for first in cold)
    second = at_once["after"]
    assert second.metrics["recompiles"] < min(first.metrics["recompiles"] for first in cold)
    assert second.summary["shared_cache"]["warm"] is True
