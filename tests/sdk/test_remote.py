"""Remote SageMaker jobs, submitted for real to moto in server mode (no mocks in this process).

What is asserted is what the emulator holds: the job DescribeTrainingJob returns,
the objects in the bucket, and the request bodies moto's recorder kept (moto
answers DescribeTrainingJob with canned MetricDefinitions, so those are checked
on the request it received).
"""

from __future__ import annotations

import io
import json
import logging
import os
import tarfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import boto3
import pytest
from botocore.exceptions import ClientError
from sagemaker import image_uris
from sagemaker.huggingface import HuggingFaceModel

import trcomp
from tests.helpers.aws import (
    ACCOUNT,
    FAKE_CREDENTIALS,
    REGION,
    MotoServer,
    aws_environment,
    aws_error_server,
    complete_lines,
    create_sagemaker_role,
    moto_server,
)
from trcomp.contract.errors import UnsupportedJobError
from trcomp.contract.metrics import metric_definitions
from trcomp.image.uris import image_tag
from trcomp.remote import CredentialLeakError, default_checkpoint_uri, remote_session

DATA_BUCKET = "trcomp-test-data"
TRAIN_URI = f"s3://{DATA_BUCKET}/train"
DEFAULT_BUCKET = f"sagemaker-{REGION}-{ACCOUNT}"
TRAIN_SCRIPT = "import sys\nprint('training', sys.argv)\n"


@pytest.fixture(scope="module")
def moto(tmp_path_factory: pytest.TempPathFactory) -> Iterator[MotoServer]:
    tmp = tmp_path_factory.mktemp("moto")
    with moto_server(tmp) as server, aws_environment(server.url):
        yield server


@pytest.fixture(scope="module")
def role(moto: MotoServer) -> str:
    boto3.client("s3").create_bucket(
        Bucket=DATA_BUCKET, CreateBucketConfiguration={"LocationConstraint": REGION}
    )
    boto3.client("s3").put_object(Bucket=DATA_BUCKET, Key="train/part-0.txt", Body=b"1 2 3\n")
    return create_sagemaker_role("trcomp-sagemaker")


@pytest.fixture
def source_dir(tmp_path: Path) -> Path:
    src = tmp_path / "src"
    src.mkdir()
    (src / "train.py").write_text(TRAIN_SCRIPT)
    (src / "requirements.txt").write_text("")
    return src


def _estimator(
    source_dir: Path,
    role: str,
    instance_type: str = "ml.g5.xlarge",
    *,
    estimator_class: Any = trcomp.PyTorch,
    **kwargs: Any,
) -> Any:
    """A remote job for ``train.py`` in ``source_dir``, on one instance unless told."""
    kwargs.setdefault("instance_count", 1)
    return estimator_class(
        entry_point="train.py",
        source_dir=str(source_dir),
        role=role,
        instance_type=instance_type,
        **kwargs,
    )


def _describe(job_name: str) -> dict[str, Any]:
    return dict(boto3.client("sagemaker").describe_training_job(TrainingJobName=job_name))


def _create_request(moto: MotoServer, job_name: str) -> dict[str, Any]:
    found = [r for r in moto.json_requests("CreateTrainingJob") if r["TrainingJobName"] == job_name]
    assert len(found) == 1, f"emulator received {len(found)} CreateTrainingJob for {job_name}"
    return found[0]


def _tarball_members(s3_uri: str) -> dict[str, bytes]:
    bucket, key = s3_uri.removeprefix("s3://").split("/", 1)
    body = boto3.client("s3").get_object(Bucket=bucket, Key=key)["Body"].read()
    with tarfile.open(fileobj=io.BytesIO(body), mode="r:gz") as tar:
        return {
            m.name: tar.extractfile(m).read()  # type: ignore[union-attr]
            for m in tar.getmembers()
            if m.isfile()
        }


def _assert_job(
    moto: MotoServer, job_name: str, role: str, instance: str, count: int
) -> dict[str, Any]:
    """What every compiled job must hold; returns the stored job."""
    job = _describe(job_name)
    config = trcomp.TrainingCompilerConfig()
    hps = job["HyperParameters"]
    for key, value in config.to_hyperparameters().items():
        assert hps[key] == value
    assert json.loads(hps["sagemaker_program"]) == "train.py"
    submit_dir = json.loads(hps["sagemaker_submit_directory"])
    assert submit_dir == f"s3://{DEFAULT_BUCKET}/{job_name}/source/sourcedir.tar.gz"
    assert _tarball_members(submit_dir)["train.py"] == TRAIN_SCRIPT.encode()
    registry = f"{ACCOUNT}.dkr.ecr.{REGION}.amazonaws.com"
    expected_image = f"{registry}/trcomp-training:{image_tag('2.9.0', 'gpu')}"
    assert job["AlgorithmSpecification"]["TrainingImage"] == expected_image
    assert job["RoleArn"] == role
    assert job["ResourceConfig"]["InstanceType"] == instance
    assert job["ResourceConfig"]["InstanceCount"] == count
    channels = {
        c["ChannelName"]: c["DataSource"]["S3DataSource"]["S3Uri"] for c in job["InputDataConfig"]
    }
    assert channels == {"train": TRAIN_URI}
    request = _create_request(moto, job_name)
    assert request["AlgorithmSpecification"]["MetricDefinitions"] == metric_definitions()
    # Debugger and profiler hooks make compilers recompile: the estimators leave them off.
    assert "DebugHookConfig" not in request
    assert request["ProfilerConfig"] == {"DisableProfiler": True}
    return job


def _user_attributes(estimator: Any) -> dict[str, Any]:
    """What the user set on an estimator; trcomp's fit() leaves every one of them as it was.

    (Not ``base_job_name`` nor an unset ``output_path``: the SDK's own ``fit()`` fills
    them in, the job name's prefix and the default bucket, with or without trcomp.)
    """
    names = (
        "checkpoint_s3_uri",
        "checkpoint_local_path",
        "environment",
        "distribution",
        "compiler_config",
        "instance_type",
        "instance_count",
        "entry_point",
        "source_dir",
    )
    return {name: json.dumps(getattr(estimator, name), default=repr) for name in names}


def test_a_recording_read_while_moto_writes_holds_the_answered_requests(
    moto: MotoServer, role: str
) -> None:
    # moto writes an entry before it answers, in pieces when it is long: a request of
    # another SDK thread still in flight leaves a cut last line (seen in a CI run).
    boto3.client("s3").put_object(Bucket=DATA_BUCKET, Key="cut/object", Body=b"x" * 20_000)
    recording = moto.api("/moto-api/recorder/download-recording").decode()
    # Up to the put's entry: a request of another thread may already follow it.
    put = next(line for line in recording.splitlines() if "/cut/object" in line)
    text = recording[: recording.index(put) + len(put) + 1]
    entries = text.splitlines()
    assert text.endswith("\n") and entries[-1] == put
    answered = len(text) - len(put) - 1
    for cut in range(answered, len(text), 997):
        assert complete_lines(text[:cut]) == entries[:-1]
    assert complete_lines(text) == entries
    assert any(e["url"].endswith("/cut/object") for e in moto.requests())


def test_pytorch_job_reaches_sagemaker(moto: MotoServer, role: str, source_dir: Path) -> None:
    estimator = _estimator(
        source_dir,
        role,
        "ml.g5.2xlarge",
        instance_count=2,
        hyperparameters={"epochs": 2},
        compiler_config=trcomp.TrainingCompilerConfig(),
    )
    before = _user_attributes(estimator)
    estimator.fit({"train": TRAIN_URI}, wait=False)
    name = estimator.latest_training_job.name
    job = _assert_job(moto, name, role, "ml.g5.2xlarge", 2)
    assert job["HyperParameters"]["epochs"] == "2"
    checkpoint = f"s3://{DEFAULT_BUCKET}/trcomp-checkpoints/train/"
    assert _create_request(moto, name)["CheckpointConfig"] == {"S3Uri": checkpoint}
    assert job["CheckpointConfig"]["S3Uri"] == checkpoint
    # The default location reached the job through its spec, not the user's estimator.
    assert _user_attributes(estimator) == before and estimator.checkpoint_s3_uri is None
    assert estimator.latest_job_spec is not None
    assert estimator.latest_job_spec.checkpoint_s3_uri == checkpoint


def test_huggingface_job_reaches_sagemaker(moto: MotoServer, role: str, source_dir: Path) -> None:
    estimator = _estimator(
        source_dir,
        role,
        "ml.p4d.24xlarge",
        estimator_class=trcomp.HuggingFace,
        base_job_name="bert-finetune",
        compiler_config=trcomp.TrainingCompilerConfig(),
    )
    estimator.fit({"train": TRAIN_URI}, wait=False)
    name = estimator.latest_training_job.name
    assert name.startswith("bert-finetune-")
    _assert_job(moto, name, role, "ml.p4d.24xlarge", 1)
    checkpoint = f"s3://{DEFAULT_BUCKET}/trcomp-checkpoints/bert-finetune/train/"
    assert _create_request(moto, name)["CheckpointConfig"]["S3Uri"] == checkpoint


def test_user_checkpoint_location_wins(moto: MotoServer, role: str, source_dir: Path) -> None:
    mine = f"s3://{DATA_BUCKET}/my-checkpoints/run-7"
    estimator = _estimator(
        source_dir,
        role,
        checkpoint_s3_uri=mine,
        checkpoint_local_path="/opt/ml/my-checkpoints",
        environment={"MY_SETTING": "1"},
        compiler_config=trcomp.TrainingCompilerConfig(),
    )
    before = _user_attributes(estimator)
    estimator.fit({"train": TRAIN_URI}, wait=False)
    request = _create_request(moto, estimator.latest_training_job.name)
    assert request["CheckpointConfig"] == {"S3Uri": mine, "LocalPath": "/opt/ml/my-checkpoints"}
    # The container keeps its compile caches in the directory SageMaker syncs. (moto
    # does not store a training job's Environment, so this is checked on the request.)
    assert request["Environment"] == {
        "MY_SETTING": "1",
        "TRCOMP_CHECKPOINT_DIR": "/opt/ml/my-checkpoints",
    }
    assert _user_attributes(estimator) == before
    assert estimator.environment == {"MY_SETTING": "1"}


@pytest.mark.parametrize(
    "config",
    [
        trcomp.TrainingCompilerConfig(cache=False),
        trcomp.TrainingCompilerConfig(enabled=False),
        None,
    ],
)
def test_no_checkpoint_without_cache(
    moto: MotoServer, role: str, source_dir: Path, config: trcomp.TrainingCompilerConfig | None
) -> None:
    estimator = _estimator(source_dir, role, compiler_config=config)
    assert default_checkpoint_uri(estimator.job_spec(), estimator.sagemaker_session) is None
    estimator.fit({"train": TRAIN_URI}, wait=False)
    assert "CheckpointConfig" not in _create_request(moto, estimator.latest_training_job.name)


def test_local_modes_get_no_s3_checkpoint() -> None:
    # (One mode: building a LocalSession costs seconds of SDK config validation.)
    for instance_type in ("local_process",):
        estimator = trcomp.PyTorch(
            entry_point="train.py",
            role="arn:aws:iam::111111111111:role/x",
            instance_type=instance_type,
            instance_count=1,
            compiler_config=trcomp.TrainingCompilerConfig(),
        )
        assert estimator.checkpoint_s3_uri is None


def test_no_credentials_in_job(
    moto: MotoServer,
    role: str,
    source_dir: Path,
    caplog: pytest.LogCaptureFixture,
    capfd: pytest.CaptureFixture[str],
) -> None:
    # trcomp's and the SDK's own records at DEBUG. botocore's DEBUG records print
    # request headers (the Authorization header names the access key) by design.
    caplog.set_level(logging.INFO)
    caplog.set_level(logging.DEBUG, logger="trcomp")
    caplog.set_level(logging.DEBUG, logger="sagemaker")
    estimator = _estimator(
        source_dir,
        role,
        "ml.g5.2xlarge",
        estimator_class=trcomp.HuggingFace,
        environment={"TOKENIZERS_PARALLELISM": "false"},
        hyperparameters={"max_tokens": 128},
        compiler_config=trcomp.TrainingCompilerConfig(debug=True),
    )
    estimator.fit({"train": TRAIN_URI}, wait=False)
    name = estimator.latest_training_job.name
    request = _create_request(moto, name)
    assert request["Environment"] == {"TOKENIZERS_PARALLELISM": "false"}
    stored = json.dumps(_describe(name), default=str)
    code = json.loads(request["HyperParameters"]["sagemaker_submit_directory"])
    tarball = b"".join(_tarball_members(code).values()).decode()
    out, err = capfd.readouterr()
    searched = {
        "CreateTrainingJob request": json.dumps(request),
        "stored job": stored,
        "source tarball": tarball,
        "logs": caplog.text + out + err,
    }
    assert caplog.text  # the search is over real log records, not nothing
    for where, text in searched.items():
        for name_, secret in FAKE_CREDENTIALS.items():
            assert secret not in text, f"{name_} found in {where}"


def test_credentials_in_hyperparameters_are_refused(
    moto: MotoServer, role: str, source_dir: Path
) -> None:
    before = len(moto.json_requests("CreateTrainingJob"))
    uploads = len([r for r in moto.requests() if r["method"] == "PUT"])
    estimator = _estimator(
        source_dir,
        role,
        hyperparameters={"hub_token": os.environ["AWS_SESSION_TOKEN"]},
        compiler_config=trcomp.TrainingCompilerConfig(),
    )
    with pytest.raises(CredentialLeakError, match="'hub_token' holds AWS credentials") as info:
        estimator.fit({"train": TRAIN_URI}, wait=False)
    assert FAKE_CREDENTIALS["AWS_SESSION_TOKEN"] not in str(info.value)
    assert len(moto.json_requests("CreateTrainingJob")) == before
    assert len([r for r in moto.requests() if r["method"] == "PUT"]) == uploads
    estimator = _estimator(source_dir, role, environment={"AWS_SECRET_ACCESS_KEY": "anything"})
    with pytest.raises(CredentialLeakError, match="environment variable 'AWS_SECRET_ACCESS_KEY'"):
        estimator.fit({"train": TRAIN_URI}, wait=False)


def test_access_denied_surfaces_with_context(moto: MotoServer, role: str, source_dir: Path) -> None:
    iam = boto3.client("iam")
    iam.create_user(UserName="no-sagemaker")
    policy = {
        "Version": "2012-10-17",
        "Statement": [{"Effect": "Allow", "Action": ["s3:*", "sts:*"], "Resource": "*"}],
    }
    iam.put_user_policy(
        UserName="no-sagemaker", PolicyName="s3-only", PolicyDocument=json.dumps(policy)
    )
    key = iam.create_access_key(UserName="no-sagemaker")["AccessKey"]
    as_user = boto3.Session(
        aws_access_key_id=key["AccessKeyId"], aws_secret_access_key=key["SecretAccessKey"]
    )
    estimator = _estimator(
        source_dir,
        role,
        sagemaker_session=remote_session(as_user),
        compiler_config=trcomp.TrainingCompilerConfig(),
    )
    moto.set_iam_checks(True)
    try:
        with pytest.raises(ClientError) as info:
            estimator.fit({"train": TRAIN_URI}, wait=False)
    finally:
        moto.set_iam_checks(False)
    error = info.value
    assert error.operation_name == "CreateTrainingJob", error.response
    assert error.response["ResponseMetadata"]["HTTPStatusCode"] == 403
    # moto answers in XML, which botocore cannot parse for this JSON API: the code is
    # the status and AWS's message stays in the error, so trcomp reads the code from it.
    assert "is not authorized to perform: sagemaker:CreateTrainingJob" in str(error)
    note = "\n".join(getattr(error, "__notes__", []))
    assert "trcomp: CreateTrainingJob failed with AccessDenied (HTTP 403)" in note
    assert "iam:PassRole" in note and "ml.g5.xlarge" in note


@pytest.mark.parametrize(
    ("code", "message", "hint"),
    [
        (
            "ValidationException",
            f"Could not assume role arn:aws:iam::{ACCOUNT}:role/missing. Please ensure that "
            "the role exists and allows principal 'sagemaker.amazonaws.com' to assume the role.",
            "pass role= the ARN of an existing IAM role",
        ),
        (
            "ResourceLimitExceeded",
            "The account-level service limit 'ml.p5.48xlarge for training job usage' is 0 "
            "Instances, with current utilization of 0 Instances and a request delta of 1 "
            "Instances.",
            "request an increase in Service Quotas",
        ),
    ],
)
def test_sagemaker_refusals_surface_with_context(
    moto: MotoServer,
    source_dir: Path,
    monkeypatch: pytest.MonkeyPatch,
    code: str,
    message: str,
    hint: str,
) -> None:
    with aws_error_server() as refusing:
        refusing.code, refusing.message = code, message
        # Only SageMaker answers with the error; STS and S3 stay on moto.
        monkeypatch.setenv("AWS_ENDPOINT_URL_SAGEMAKER", refusing.url)
        estimator = _estimator(
            source_dir,
            f"arn:aws:iam::{ACCOUNT}:role/missing",
            "ml.p5.48xlarge",
            compiler_config=trcomp.TrainingCompilerConfig(),
        )
        with pytest.raises(ClientError) as info:
            estimator.fit({"train": TRAIN_URI}, wait=False)
    assert refusing.received == ["SageMaker.CreateTrainingJob"]
    error = info.value
    assert error.response["Error"]["Code"] == code
    assert message in str(error)  # AWS's own message is kept
    note = "\n".join(getattr(error, "__notes__", []))
    assert f"CreateTrainingJob failed with {code}" in note and hint in note
    assert "role/missing" in note and "ml.p5.48xlarge" in note


# -- models and attach (issue 11): never the training image, the job's own versions ------


# moto's endpoint instance types stop at g4dn.
ENDPOINT_INSTANCE = "ml.g4dn.xlarge"
# Versions with inference images in every SageMaker SDK v2 that pyproject allows.
SERVED = {"transformers_version": "4.37.0", "pytorch_version": "2.1.0", "py_version": "py310"}


def _finished_job(estimator: Any) -> str:
    """Submit ``estimator`` and put a model.tar.gz where the job's artifacts would be."""
    estimator.fit({"train": TRAIN_URI}, wait=False)
    name = str(estimator.latest_training_job.name)
    bucket, key = _describe(name)["ModelArtifacts"]["S3ModelArtifacts"][5:].split("/", 1)
    model = io.BytesIO()
    with tarfile.open(fileobj=model, mode="w:gz") as tar:
        tar.addfile(tarfile.TarInfo("model.pt"), io.BytesIO(b""))
    boto3.client("s3").put_object(Bucket=bucket, Key=key, Body=model.getvalue())
    return name


def _models(moto: MotoServer) -> list[dict[str, Any]]:
    return moto.json_requests("CreateModel")


def test_deploy_refuses_the_training_image_before_creating_anything(
    moto: MotoServer, role: str, source_dir: Path
) -> None:
    estimator = _estimator(source_dir, role, compiler_config=trcomp.TrainingCompilerConfig())
    _finished_job(estimator)
    models = len(_models(moto))
    with pytest.raises(UnsupportedJobError) as info:
        estimator.deploy(initial_instance_count=1, instance_type=ENDPOINT_INSTANCE, wait=False)
    message = str(info.value)
    assert "trains and cannot serve" in message and "framework_version='2.9.0'" in message
    assert "deploy(..., image_uri=...)" in message
    assert "trcomp-deferred" not in message
    assert len(_models(moto)) == models
    assert moto.json_requests("CreateEndpointConfig") == []


def test_deploy_with_an_inference_image(moto: MotoServer, role: str, source_dir: Path) -> None:
    inference = image_uris.retrieve(
        "pytorch",
        REGION,
        version=SERVED["pytorch_version"],
        py_version=SERVED["py_version"],
        instance_type=ENDPOINT_INSTANCE,
        image_scope="inference",
    )
    estimator = _estimator(source_dir, role, compiler_config=trcomp.TrainingCompilerConfig())
    _finished_job(estimator)
    estimator.deploy(
        initial_instance_count=1, instance_type=ENDPOINT_INSTANCE, image_uri=inference, wait=False
    )
    assert _models(moto)[-1]["PrimaryContainer"]["Image"] == inference


def test_model_gets_the_sdks_inference_image_for_its_versions(
    moto: MotoServer, role: str, source_dir: Path
) -> None:
    # A job on the user's own training image, of a torch version the SDK can serve:
    # the model gets the SDK's inference image for the endpoint, not the training image.
    estimator = _estimator(
        source_dir,
        role,
        image_uri=f"{ACCOUNT}.dkr.ecr.{REGION}.amazonaws.com/my-train:2.1",
        framework_version=SERVED["pytorch_version"],
        py_version=SERVED["py_version"],
        compiler_config=trcomp.TrainingCompilerConfig(),
    )
    _finished_job(estimator)
    model = estimator.create_model()
    assert model.image_uri is None  # resolved per endpoint instance type, as the SDK does
    estimator.deploy(initial_instance_count=1, instance_type=ENDPOINT_INSTANCE, wait=False)
    expected = image_uris.retrieve(
        "pytorch",
        REGION,
        version=SERVED["pytorch_version"],
        py_version=SERVED["py_version"],
        instance_type=ENDPOINT_INSTANCE,
        image_scope="inference",
    )
    assert _models(moto)[-1]["PrimaryContainer"]["Image"] == expected


def test_huggingface_model_gets_the_transformers_version(
    moto: MotoServer, role: str, source_dir: Path
) -> None:
    estimator = _estimator(
        source_dir,
        role,
        estimator_class=trcomp.HuggingFace,
        image_uri=f"{ACCOUNT}.dkr.ecr.{REGION}.amazonaws.com/my-hf-train:1",
        compiler_config=trcomp.TrainingCompilerConfig(),
        **SERVED,
    )
    _finished_job(estimator)
    model = estimator.create_model()
    assert (model.framework_version, model.pytorch_version) == (
        SERVED["transformers_version"],
        SERVED["pytorch_version"],
    )
    expected = HuggingFaceModel(
        role=role,
        model_data="s3://b/m.tar.gz",
        sagemaker_session=estimator.sagemaker_session,
        **SERVED,
    ).serving_image_uri(REGION, ENDPOINT_INSTANCE)
    assert model.serving_image_uri(REGION, ENDPOINT_INSTANCE) == expected


@pytest.mark.parametrize("estimator_class", [trcomp.PyTorch, trcomp.HuggingFace])
def test_attach_gets_the_jobs_config_and_versions(
    moto: MotoServer, role: str, source_dir: Path, estimator_class: Any
) -> None:
    config = trcomp.TrainingCompilerConfig(debug=True, mode="max-autotune")
    # output_kms_key: the SDK's attach() reads KmsKeyId, which moto only returns when set.
    estimator = _estimator(
        source_dir,
        role,
        estimator_class=estimator_class,
        compiler_config=config,
        output_kms_key="alias/trcomp-test",
    )
    name = _finished_job(estimator)
    attached = estimator_class.attach(name)
    assert attached.compiler_config == config
    assert attached.py_version == "py311"
    assert attached.training_image_uri() == estimator.training_image_uri()
    hps = attached.hyperparameters()
    assert {k: hps[k] for k in config.to_hyperparameters()} == config.to_hyperparameters()
    if estimator_class is trcomp.HuggingFace:
        # transformers is not in trcomp's image, so its version is not in the tag.
        assert (attached.pytorch_version, attached.framework_version) == ("2.9.0", None)
    else:
        assert attached.framework_version == "2.9.0"
