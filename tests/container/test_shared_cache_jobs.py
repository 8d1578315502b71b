"""Done-when of the shared compile cache, with real jobs through the real entrypoint.

For each store (a shared directory, S3 through a moto server, a real
redis-server) a first job fills the shared cache and a second job, with
another job name and another checkpoint location, reads it. Then: four jobs
at once on an empty cache, a bucket of another account, the jax engine, and
dynamo's profile-guided dynamic shapes kept across jobs.
"""

from __future__ import annotations

import concurrent.futures
import shutil

import pytest

from tests.helpers import jobs
from tests.helpers.aws import OTHER_ACCOUNT, aws_environment, create_bucket, moto_server
from tests.helpers.redis_server import redis_server
from trcomp.config import TrainingCompilerConfig
from trcomp_container.cache_key import compat_set
from trcomp_container.failures import ExitCode
from trcomp_container.shared_cache import open_shared_cache

pytestmark = pytest.mark.slow

LOOP_HPS = {"steps": 8}


@pytest.fixture(scope="module")
def services(tmp_path_factory):
    """A moto server with the team's bucket and another account's, and a redis-server."""

    tmp = tmp_path_factory.mktemp("services")
    with moto_server(tmp) as moto, aws_environment(moto.url) as aws, redis_server(tmp) as redis:
        create_bucket("team-cache")
        create_bucket("someone-elses-cache", account=OTHER_ACCOUNT)
        yield {"aws": aws, "redis": redis.url, "tmp": tmp}


def _uri(kind: str, services) -> str:
    return {
        "file": f"file://{services['tmp'] / 'shared-dir'}",
        "s3": "s3://team-cache/compile-cache",
        "redis": services["redis"],
    }[kind]


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


@pytest.mark.parametrize("kind", ["file", "s3", "redis"])
def test_a_second_job_elsewhere_compiles_nothing_from_the_shared_cache(
    kind, services, tmp_path, record_property
):
    config = TrainingCompilerConfig(backend="inductor", shared_cache=_uri(kind, services))
    cold = _job(tmp_path, f"first-{kind}", config)
    warm = _job(tmp_path, f"second-{kind}", config)  # its own tree: its own checkpoints
    cold_cache, warm_cache = (run.summary["ranks"][0]["compile_cache"] for run in (cold, warm))
    assert cold_cache["fxgraph_miss"] > 0 and cold_cache["fxgraph_hit"] == 0
    assert warm_cache["fxgraph_hit"] > 0 and warm_cache["fxgraph_miss"] == 0
    assert cold.summary["cache_warm"] is False and warm.summary["cache_warm"] is True
    shared = warm.summary["shared_cache"]
    assert shared["kind"] == kind and shared["warm"] is True
    if kind != "redis":
        assert cold.summary["shared_cache"]["files_written"] > 0
        assert shared["files_read"] == cold.summary["shared_cache"]["files_written"]
        assert shared["bytes_read"] > 0 and shared["files_written"] == 0
    first_steps = {run: r.metrics["first_step_s"] for run, r in (("cold", cold), ("warm", warm))}
    for name, value in first_steps.items():
        record_property(f"{kind}_{name}_first_step_s", value)
    print(f"shared cache {kind}: first step {first_steps}")  # recorded, not asserted


def test_four_jobs_at_once_on_an_empty_shared_cache_all_succeed(services, tmp_path):
    uri = f"file://{tmp_path / 'empty-shared'}"
    config = TrainingCompilerConfig(backend="inductor", shared_cache=uri)
    with concurrent.futures.ThreadPoolExecutor(4) as pool:
        runs = list(pool.map(lambda i: _job(tmp_path, f"at-once-{i}", config), range(4)))
    assert all(run.summary["shared_cache"]["files_written"] > 0 for run in runs)
    # Every entry they wrote is whole: a reader takes them all, skips none.
    reader = open_shared_cache(
        uri,
        compat=compat_set(engine="inductor", gpu_listing=None),
        engine="inductor",
        live=tmp_path / "reader" / "live",
        environ={},
        remote_job=False,
    )
    assert reader.facts["entries_found"] == 4
    assert reader.facts["entries_read"] == 4 and reader.facts["entries_skipped"] == 0


def test_a_damaged_entry_is_skipped_and_the_job_compiles_cold(services, tmp_path):
    uri = f"file://{tmp_path / 'damaged'}"
    config = TrainingCompilerConfig(backend="inductor", shared_cache=uri)
    _job(tmp_path, "writer", config)
    (entry,) = (p for p in (tmp_path / "damaged").rglob("*.tar.gz"))
    entry.write_bytes(entry.read_bytes()[: entry.stat().st_size // 2])
    run = _job(tmp_path, "reader", config)
    assert run.summary["shared_cache"]["entries_skipped"] == 1
    assert run.summary["cache_warm"] is False
    assert any(entry.name in w and "truncated" in w for w in run.summary["warnings"])
    assert run.summary["ranks"][0]["compile_cache"]["fxgraph_miss"] > 0


def test_a_bucket_of_another_account_fails_the_job_before_the_script_runs(services, tmp_path):
    config = TrainingCompilerConfig(
        backend="inductor", shared_cache="s3://someone-elses-cache/compile"
    )
    run = jobs.run_job(tmp_path, config=config, entry_point="loop.py", hyperparameters=LOOP_HPS)
    assert run.returncode == ExitCode.CONFIG
    assert "not owned by the job's AWS account" in (run.failure or "")
    assert not (tmp_path / "model" / "loss.json").exists()  # the script never ran


@pytest.mark.parametrize("kind", ["file", "s3"])
def test_the_jax_engine_reads_its_programs_from_the_shared_cache(kind, services, tmp_path):
    config = TrainingCompilerConfig(
        backend="xla", xla_engine="jax", shared_cache=_uri(kind, services) + "-jax"
    )
    pytest.importorskip("torchax")
    cold = _job(tmp_path, f"jax-first-{kind}", config, entry_point="jax_loop.py")
    warm = _job(tmp_path, f"jax-second-{kind}", config, entry_point="jax_loop.py")
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


def test_dynamic_shape_decisions_travel_through_the_shared_cache(tmp_path):
    """The PGO state under the shared location's job id: another checkpoint location, same gain."""
    uri = f"file://{tmp_path / 'shared-pgo'}"
    config = TrainingCompilerConfig(backend="inductor", shared_cache=uri)
    first = _job(tmp_path, "pgo-shared-first", config, entry_point="varlen.py")
    second = _job(tmp_path, "pgo-shared-second", config, entry_point="varlen.py")
    assert first.metrics["recompiles"] >= 1
    assert second.metrics["recompiles"] < first.metrics["recompiles"]
    assert second.summary["shared_cache"]["warm"] is True
