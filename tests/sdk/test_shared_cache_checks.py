"""``shared_cache=`` checked at ``fit()``, before anything is created or uploaded.

A moto server holds a bucket of the caller's account and one of another account
(moto takes the account from the ``x-moto-account-id`` header). Remote jobs are
submitted to moto for real; process mode runs nothing when it refuses.
"""

from __future__ import annotations

import json
import warnings
from collections.abc import Iterator
from pathlib import Path

import pytest

import trcomp
from tests.helpers.aws import (
    OTHER_ACCOUNT,
    MotoServer,
    aws_environment,
    create_bucket,
    create_sagemaker_role,
    moto_server,
)
from trcomp.contract.errors import CompilerConfigWarning, LocalModeError, SharedCacheError

pytestmark = pytest.mark.slow

FOREIGN = "s3://someone-elses-cache/compile"
OWN = "s3://team-cache/compile"


@pytest.fixture(scope="module")
def moto(tmp_path_factory: pytest.TempPathFactory) -> Iterator[MotoServer]:
    with moto_server(tmp_path_factory.mktemp("moto")) as server, aws_environment(server.url):
        create_bucket("team-cache")
        create_bucket("someone-elses-cache", account=OTHER_ACCOUNT)
        yield server


@pytest.fixture(scope="module")
def role(moto: MotoServer) -> str:
    return create_sagemaker_role("trcomp-shared-cache")


def _estimator(tmp: Path, role: str, uri: str, instance_type: str, **kwargs):
    (tmp / "src").mkdir(exist_ok=True)
    (tmp / "src" / "train.py").write_text("print('trained')\n")
    return trcomp.PyTorch(
        entry_point="train.py",
        source_dir=str(tmp / "src"),
        role=role,
        instance_type=instance_type,
        instance_count=1,
        compiler_config=trcomp.TrainingCompilerConfig(backend="inductor", shared_cache=uri),
        **kwargs,
    )


def test_process_mode_refuses_another_accounts_bucket_before_anything_runs(moto, role, tmp_path):
    out = tmp_path / "out"
    estimator = _estimator(tmp_path, role, FOREIGN, "local_process", output_path=f"file://{out}")
    with pytest.raises(SharedCacheError, match="not owned by the job's AWS account 123456789012"):
        estimator.fit(job_name="foreign-cache")
    assert not out.exists()  # no job folder: nothing was created


def test_a_remote_job_with_another_accounts_bucket_is_never_submitted(moto, role, tmp_path):
    before = len(moto.json_requests("CreateTrainingJob"))
    puts = len([r for r in moto.requests() if r["method"] == "PUT"])
    estimator = _estimator(tmp_path, role, FOREIGN, "ml.g5.xlarge")
    with pytest.raises(SharedCacheError, match="before the job started"):
        estimator.fit(wait=False)
    assert len(moto.json_requests("CreateTrainingJob")) == before
    assert len([r for r in moto.requests() if r["method"] == "PUT"]) == puts  # no upload


def test_a_remote_job_with_its_own_accounts_bucket_is_submitted_with_the_location(
    moto, role, tmp_path
):
    estimator = _estimator(tmp_path, role, OWN, "ml.g5.xlarge")
    estimator.fit(wait=False, job_name="own-shared-cache")
    (sent,) = [
        r
        for r in moto.json_requests("CreateTrainingJob")
        if r["TrainingJobName"] == "own-shared-cache"
    ]
    config = json.loads(sent["HyperParameters"]["sagemaker_training_compiler_config"])
    assert config["shared_cache"] == OWN


def test_a_redis_cache_without_a_password_warns_for_a_remote_job_only(moto, role, tmp_path):
    with pytest.warns(CompilerConfigWarning, match="has no password"):
        _estimator(tmp_path, role, "redis://cache.internal:6379", "ml.g5.xlarge")
    with warnings.catch_warnings():
        warnings.simplefilter("error", CompilerConfigWarning)
        _estimator(tmp_path, role, "redis://:pw@cache.internal:6379", "ml.g5.xlarge")
        _estimator(tmp_path, role, "redis://127.0.0.1:6379", "local_process")


def test_local_directories_are_checked_where_they_can_be_used(moto, role, tmp_path):
    blocked = tmp_path / "a-file"
    blocked.write_text("")
    estimator = _estimator(tmp_path, role, f"file://{blocked}/cache", "local_process")
    with pytest.raises(LocalModeError, match=r"shared_cache .* cannot be created"):
        estimator.fit(job_name="unwritable")
    estimator = _estimator(tmp_path, role, f"file://{tmp_path}/cache", "local")
    with pytest.raises(LocalModeError, match="Docker local mode does not mount"):
        estimator.fit(job_name="docker-dir")
