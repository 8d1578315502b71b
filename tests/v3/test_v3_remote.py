"""A remote trcomp.v3.ModelTrainer job against a moto server: the CreateTrainingJob it sends.

moto cannot simulate IAM policies (v3 calls iam:SimulatePrincipalPolicy to check
the role), so the role check is off here (``SAGEMAKER_VALIDATE_ROLE=false``), and
v3's ``Session.default_bucket()`` calls the public STS endpoint, so the session
names its bucket. Everything else reaches the emulator for real.
"""

from __future__ import annotations

import json
import os
import time
import warnings
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip(
    "sagemaker.train.model_trainer", reason="needs the SageMaker SDK v3: run make test-v3"
)

import boto3
from sagemaker.core.helper.session_helper import Session
from sagemaker.core.shapes import CheckpointConfig
from sagemaker.core.training.configs import Compute, SourceCode
from sagemaker.train.distributed import Torchrun
from sagemaker.train.model_trainer import Mode

from tests.helpers.aws import (
    ACCOUNT,
    FAKE_CREDENTIALS,
    OTHER_ACCOUNT,
    REGION,
    MotoServer,
    aws_environment,
    create_bucket,
    create_sagemaker_role,
    moto_server,
    s3control_resolves,
)
from trcomp import CompilerConfigWarning, TrainingCompilerConfig, UnsupportedJobError
from trcomp.contract.errors import SharedCacheError
from trcomp.credentials import CredentialLeakError
from trcomp.v3 import ModelTrainer

BUCKET = "trcomp-v3-test-bucket"
INDUCTOR = TrainingCompilerConfig(backend="inductor")


@pytest.fixture(scope="module")
def aws(tmp_path_factory) -> Iterator[tuple[MotoServer, str]]:
    """A moto server, boto3 pointed at it, and an execution role that exists there."""
    saved = os.environ.get("SAGEMAKER_VALIDATE_ROLE")
    os.environ["SAGEMAKER_VALIDATE_ROLE"] = "false"
    try:
        with (
            moto_server(tmp_path_factory.mktemp("moto")) as server,
            aws_environment(server.url),
            s3control_resolves(),
        ):
            create_bucket("team-cache")
            create_bucket("someone-elses-cache", account=OTHER_ACCOUNT)
            yield server, create_sagemaker_role("SageMakerRole")
    finally:
        if saved is None:
            os.environ.pop("SAGEMAKER_VALIDATE_ROLE", None)
        else:
            os.environ["SAGEMAKER_VALIDATE_ROLE"] = saved


def _settled_count(server: MotoServer) -> int:
    """How many requests the server has, once earlier tests' background calls are in.

    v3 sends some calls (telemetry) from background threads that may land after
    their test ended; a test that asserts "no call" counts from a quiet server.
    """
    count = len(server.requests())
    for _ in range(20):
        time.sleep(0.5)
        now = len(server.requests())
        if now == count:
            return count
        count = now
    return count


def _stored_keys() -> set[str]:
    """Every object key in the trainers' bucket (none: it does not exist yet)."""
    s3 = boto3.client("s3")
    if BUCKET not in {b["Name"] for b in s3.list_buckets()["Buckets"]}:
        return set()
    pages = s3.get_paginator("list_objects_v2").paginate(Bucket=BUCKET)
    return {obj["Key"] for page in pages for obj in page.get("Contents", [])}


def remote_trainer(role: str, source_dir: Path, **kwargs: Any) -> ModelTrainer:
    options: dict[str, Any] = {
        "source_code": SourceCode(source_dir=str(source_dir), entry_script="ddp.py"),
        "compute": Compute(instance_type="ml.g5.2xlarge", instance_count=1),
        "role": role,
        "sagemaker_session": Session(boto_session=boto3.Session(), default_bucket=BUCKET),
        "compiler_config": INDUCTOR,
        **kwargs,
    }
    return ModelTrainer(**options)


def test_the_create_training_job_request(aws, source_dir, monkeypatch) -> None:
    server, role = aws
    monkeypatch.delenv("TRCOMP_IMAGE_URI", raising=False)
    (source_dir / "__pycache__").mkdir(exist_ok=True)
    (source_dir / "__pycache__" / "stale.pyc").write_bytes(b"x")
    trainer = remote_trainer(
        role,
        source_dir,
        hyperparameters={"steps": 20, "lr": "1e-3"},
        distributed=Torchrun(),
    )
    trainer.train(wait=False, logs=False)

    (request,) = server.json_requests("CreateTrainingJob")
    print(json.dumps(request, indent=1))  # the request, for `pytest -s`
    # trcomp's image with its own entrypoint: no ContainerEntrypoint, no v3 driver.
    assert request["AlgorithmSpecification"] == {
        "TrainingInputMode": "File",
        "TrainingImage": f"{ACCOUNT}.dkr.ecr.{REGION}.amazonaws.com/"
        "trcomp-training:0.1.0-torch2.9.0-gpu",
    }
    assert request["HyperParameters"] == {
        "steps": "20",
        "lr": "1e-3",
        "sagemaker_program": "ddp.py",
        "sagemaker_submit_directory": "/opt/ml/input/data/code",
        "sagemaker_torch_distributed_enabled": "true",
        "sagemaker_instance_type": '"ml.g5.2xlarge"',
        **INDUCTOR.to_hyperparameters(),
    }
    (channel,) = request["InputDataConfig"]
    assert channel["ChannelName"] == "code"
    code_uri = channel["DataSource"]["S3DataSource"]["S3Uri"]
    assert code_uri.startswith(f"s3://{BUCKET}/trcomp-training-job/")
    prefix = code_uri.removeprefix(f"s3://{BUCKET}/")
    listed = boto3.client("s3").list_objects_v2(Bucket=BUCKET, Prefix=prefix)
    uploaded = {obj["Key"].removeprefix(prefix).lstrip("/") for obj in listed["Contents"]}
    assert {"ddp.py", "loop.py"} <= uploaded
    assert not any("__pycache__" in key for key in uploaded)  # SourceCode.ignore_patterns
    # The compile cache lives in the checkpoint location: a stable default per script.
    assert request["CheckpointConfig"] == {
        "S3Uri": f"s3://{BUCKET}/trcomp-checkpoints/trcomp-training-job/ddp/"
    }
    assert "Environment" not in request or request["Environment"] == {}


def test_framework_version_picks_its_image_in_the_callers_registry(
    aws, source_dir, monkeypatch
) -> None:
    server, role = aws
    monkeypatch.delenv("TRCOMP_IMAGE_URI", raising=False)
    image = f"{ACCOUNT}.dkr.ecr.{REGION}.amazonaws.com/trcomp-training:0.1.0-torch2.14.1-gpu"
    for version in ("2.14", "2.14.1"):
        assert remote_trainer(role, source_dir, framework_version=version).training_image == image
    remote_trainer(role, source_dir, framework_version="2.14").train(wait=False, logs=False)
    request = server.json_requests("CreateTrainingJob")[-1]
    assert request["AlgorithmSpecification"]["TrainingImage"] == image


@pytest.mark.parametrize(
    ("version", "config", "match"),
    [
        (
            "2.14",
            TrainingCompilerConfig(backend="xla", xla_engine="torch_xla"),
            r"framework_version='2.14': .* Pass framework_version='2.9' to keep XLA",
        ),
        ("2.13", INDUCTOR, r"framework_version='2.13': trcomp builds no image for torch 2.13"),
    ],
)
def test_a_version_the_job_cannot_run_is_refused_before_any_aws_call(
    aws, source_dir, version, config, match
) -> None:
    server, role = aws
    before = _settled_count(server)
    with pytest.raises(UnsupportedJobError, match=match):
        remote_trainer(role, source_dir, framework_version=version, compiler_config=config)
    # No request at all: no STS call for the image, no upload of the code.
    new = server.requests()[before:]
    assert not new, [(e.get("method"), e.get("path"), e["headers"].get("User-Agent")) for e in new]


def test_the_users_image_and_checkpoint_path_are_kept(aws, source_dir, monkeypatch) -> None:
    server, role = aws
    monkeypatch.setenv("TRCOMP_IMAGE_URI", f"{ACCOUNT}.dkr.ecr.{REGION}.amazonaws.com/mine:1")
    checkpoints = CheckpointConfig(s3_uri=f"s3://{BUCKET}/mine/", local_path="/opt/ml/ckpt")
    trainer = remote_trainer(role, source_dir, checkpoint_config=checkpoints)
    trainer.train(wait=False, logs=False)
    request = server.json_requests("CreateTrainingJob")[-1]
    assert request["AlgorithmSpecification"]["TrainingImage"].endswith("/mine:1")
    assert request["CheckpointConfig"] == {
        "S3Uri": f"s3://{BUCKET}/mine/",
        "LocalPath": "/opt/ml/ckpt",
    }
    assert request["Environment"] == {"TRCOMP_CHECKPOINT_DIR": "/opt/ml/ckpt"}


@pytest.mark.parametrize(
    ("instance_type", "config", "match"),
    [
        (
            "ml.g5.2xlarge",
            TrainingCompilerConfig(backend="xla", xla_engine="torch_xla"),
            "torch-xla 2.9 has no CUDA",
        ),
        ("ml.trn1.2xlarge", INDUCTOR, "Neuron SDK"),
    ],
)
def test_the_v2_rules_refuse_before_any_aws_call(
    aws, source_dir, instance_type, config, match
) -> None:
    server, role = aws
    before = _settled_count(server)
    with pytest.raises(UnsupportedJobError, match=match):
        remote_trainer(
            role,
            source_dir,
            compute=Compute(instance_type=instance_type, instance_count=1),
            compiler_config=config,
        )
    new = server.requests()[before:]
    assert not new, [(e.get("method"), e.get("path"), e["headers"].get("User-Agent")) for e in new]


@pytest.mark.parametrize(
    ("options", "match"),
    [
        ({"distributed": Torchrun()}, "one process per device"),
        ({"compute": Compute(instance_type="ml.g5.2xlarge", instance_count=2)}, "one host"),
    ],
)
def test_the_jax_engine_rules_hold_for_v3(aws, source_dir, options, match) -> None:
    server, role = aws
    before = _settled_count(server)
    jax = TrainingCompilerConfig(backend="xla", xla_engine="jax")
    with pytest.raises(UnsupportedJobError, match=match):
        remote_trainer(role, source_dir, compiler_config=jax, **options)
    new = server.requests()[before:]
    assert not new, [(e.get("method"), e.get("path"), e["headers"].get("User-Agent")) for e in new]


def test_a_cpu_instance_warns_as_in_v2(aws, source_dir) -> None:
    _, role = aws
    with pytest.warns(CompilerConfigWarning, match="CPU instance") as caught:
        trainer = remote_trainer(
            role, source_dir, compute=Compute(instance_type="ml.m5.xlarge", instance_count=1)
        )
    # At the user's line (ModelTrainer(...) in remote_trainer), not in pydantic, which
    # runs the checks from its __init__.
    assert {w.filename for w in caught if w.category is CompilerConfigWarning} == {__file__}
    assert trainer.training_image.endswith("trcomp-training:0.1.0-torch2.9.0-cpu")


@pytest.mark.parametrize(
    ("options", "match"),
    [
        (
            {"environment": {"AWS_SECRET_ACCESS_KEY": "anything-at-all"}},
            "environment variable 'AWS_SECRET_ACCESS_KEY' holds AWS credentials",
        ),
        (
            {"hyperparameters": {"hub_token": FAKE_CREDENTIALS["AWS_SESSION_TOKEN"]}},
            "hyperparameter 'hub_token' holds AWS credentials",
        ),
        (
            {"environment": {"KEYS": f"id={FAKE_CREDENTIALS['AWS_ACCESS_KEY_ID']}"}},
            "environment variable 'KEYS' holds AWS credentials",
        ),
    ],
)
def test_the_callers_credentials_are_refused_before_anything_is_sent(
    aws, source_dir, options, match
) -> None:
    server, role = aws
    trainer = remote_trainer(role, source_dir, **options)
    jobs = len(server.json_requests("CreateTrainingJob"))
    stored = _stored_keys()
    with pytest.raises(CredentialLeakError, match=match) as info:
        trainer.train(wait=False, logs=False)
    assert not any(secret in str(info.value) for secret in FAKE_CREDENTIALS.values())
    assert len(server.json_requests("CreateTrainingJob")) == jobs
    assert _stored_keys() == stored  # nothing uploaded either


def test_local_container_jobs_keep_their_environment(source_dir, tmp_path, clean_sdk_env) -> None:
    # The refusal is for what SageMaker stores; a local container job stays on this machine.
    trainer = ModelTrainer(
        source_code=SourceCode(source_dir=str(source_dir), entry_script="loop.py"),
        compute=Compute(instance_type="local_cpu", instance_count=1),
        training_mode=Mode.LOCAL_CONTAINER,
        local_container_root=str(tmp_path / "root"),
        environment={"AWS_SECRET_ACCESS_KEY": "local-only-value"},
        compiler_config=INDUCTOR,
    )
    assert trainer.train(dry_run=True) is None


# -- shared_cache=: the checks v2's fit() makes, at train(), before anything is sent ----------


KEY_REF = {"TRCOMP_SHARED_CACHE_KEY_SECRET": "arn:aws:secretsmanager:us-west-2:1:secret:k"}


def _shared(uri: str, **options: Any) -> TrainingCompilerConfig:
    return TrainingCompilerConfig(backend="inductor", shared_cache=uri, **options)


def _public_bucket(name: str) -> None:
    create_bucket(name)
    boto3.client("s3").put_bucket_acl(Bucket=name, ACL="public-read-write")


@pytest.mark.parametrize(
    ("bucket", "environment", "match"),
    [
        ("someone-elses-cache", KEY_REF, "is not owned by the job's AWS account 123456789012"),
        ("v3-public-cache", KEY_REF, r"grants AllUsers access\), so trcomp refuses it \(before"),
        (
            "team-cache",
            {"TRCOMP_SHARED_CACHE_KEY": "team-key-0123456789abcdef"},
            "'TRCOMP_SHARED_CACHE_KEY' holds a shared cache secret in clear text",
        ),
    ],
)
def test_a_shared_cache_the_job_must_not_trust_is_refused_before_anything_is_sent(
    aws, source_dir, bucket, environment, match
) -> None:
    server, role = aws
    if bucket == "v3-public-cache":
        _public_bucket(bucket)
    trainer = remote_trainer(
        role,
        source_dir,
        compiler_config=_shared(f"s3://{bucket}/compile"),
        environment=environment,
    )
    jobs = len(server.json_requests("CreateTrainingJob"))
    stored = _stored_keys()
    with pytest.raises(SharedCacheError, match=match):
        trainer.train(wait=False, logs=False)
    assert len(server.json_requests("CreateTrainingJob")) == jobs
    assert _stored_keys() == stored  # the code was not uploaded either


def test_a_shared_cache_of_the_jobs_account_is_submitted(aws, source_dir) -> None:
    server, role = aws
    trainer = remote_trainer(
        role, source_dir, compiler_config=_shared("s3://team-cache/compile"), environment=KEY_REF
    )
    trainer.train(wait=False, logs=False)
    request = server.json_requests("CreateTrainingJob")[-1]
    sent = json.loads(request["HyperParameters"]["sagemaker_training_compiler_config"])
    assert sent["shared_cache"] == "s3://team-cache/compile"
    assert request["Environment"] == KEY_REF


def test_the_accounts_block_public_access_lets_a_public_bucket_through(aws, source_dir) -> None:
    server, role = aws
    _public_bucket("v3-account-blocked-cache")
    s3control = boto3.client("s3control")
    s3control.put_public_access_block(
        AccountId=ACCOUNT,
        PublicAccessBlockConfiguration={"IgnorePublicAcls": True, "RestrictPublicBuckets": True},
    )
    try:
        uri = "s3://v3-account-blocked-cache/compile"
        config = _shared(uri)
        trainer = remote_trainer(role, source_dir, compiler_config=config, environment=KEY_REF)
        trainer.train(wait=False, logs=False)
    finally:
        s3control.delete_public_access_block(AccountId=ACCOUNT)
    sent = server.json_requests("CreateTrainingJob")[-1]["HyperParameters"]
    assert uri in sent["sagemaker_training_compiler_config"]


def test_a_redis_password_given_as_a_secret_reference_is_seen(aws, source_dir) -> None:
    """The trainer's environment= reaches the config checks: no refusal, no key warning."""
    _, role = aws
    secrets = {
        "TRCOMP_REDIS_PASSWORD_SECRET": "arn:aws:secretsmanager:us-west-2:1:secret:redis",
    }
    uri = "rediss://cache.internal:6379/0"
    with pytest.raises(SharedCacheError, match="has no password"):
        remote_trainer(role, source_dir, compiler_config=_shared(uri))
    remote_trainer(role, source_dir, compiler_config=_shared(uri), environment=secrets)
    with pytest.warns(CompilerConfigWarning, match="has no signing key"):
        remote_trainer(role, source_dir, compiler_config=_shared("s3://team-cache/c"))
    with warnings.catch_warnings():
        warnings.simplefilter("error", CompilerConfigWarning)
        remote_trainer(
            role, source_dir, compiler_config=_shared("s3://team-cache/c"), environment=KEY_REF
        )
