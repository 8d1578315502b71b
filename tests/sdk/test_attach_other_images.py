"""attach() to jobs that did not run on trcomp's image, as the SageMaker SDK's classes do.

A plain AWS PyTorch 2.3 job, or one of the old Training Compiler's jobs on its
PyTorch 1.13.1 image, is described by a moto server (created there with
boto3's CreateTrainingJob, as SageMaker would hold it); trcomp's classes rebuild
the estimator on the job's own image and versions, never on trcomp's.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import boto3
import pytest
import sagemaker.huggingface
import sagemaker.pytorch
from sagemaker import image_uris

import trcomp
from tests.helpers.aws import REGION, aws_environment, create_sagemaker_role, moto_server
from trcomp.config import TrainingCompilerConfig


def _aws_image(framework: str, version: str, py_version: str, **kwargs: Any) -> str:
    return str(
        image_uris.retrieve(
            framework,
            REGION,
            version=version,
            py_version=py_version,
            instance_type="ml.g5.2xlarge",
            image_scope="training",
            **kwargs,
        )
    )


try:
    PYTORCH_23 = _aws_image("pytorch", "2.3", "py311")
    OLD_COMPILER = _aws_image("pytorch-training-compiler", "1.13.1", "py39")
    HF_PYTORCH_23 = _aws_image(
        "huggingface", "4.46.1", "py311", base_framework_version="pytorch2.3.0"
    )
except ValueError as exc:  # an older SDK (make test-sdk-lowest) does not know these images
    pytest.skip(f"this SageMaker SDK has no URI for the AWS images: {exc}", allow_module_level=True)


@pytest.fixture(scope="module")
def role(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    with moto_server(tmp_path_factory.mktemp("moto")) as server, aws_environment(server.url):
        yield create_sagemaker_role("trcomp-attach")


def _job(name: str, image: str, role: str, hyperparameters: dict[str, str]) -> str:
    """A finished job on ``image``, as DescribeTrainingJob returns it."""
    boto3.client("sagemaker").create_training_job(
        TrainingJobName=name,
        AlgorithmSpecification={"TrainingImage": image, "TrainingInputMode": "File"},
        RoleArn=role,
        HyperParameters={
            "sagemaker_program": json.dumps("train.py"),
            "sagemaker_submit_directory": json.dumps(f"s3://code/{name}/sourcedir.tar.gz"),
            "sagemaker_region": json.dumps(REGION),
            "sagemaker_container_log_level": "20",
            "sagemaker_job_name": json.dumps(name),
            "epochs": "3",
            **hyperparameters,
        },
        # KmsKeyId: the SDK's attach() reads it, and moto returns it only when set.
        OutputDataConfig={"S3OutputPath": "s3://out/jobs", "KmsKeyId": "alias/trcomp-test"},
        ResourceConfig={"InstanceType": "ml.g5.2xlarge", "InstanceCount": 1, "VolumeSizeInGB": 30},
        StoppingCondition={"MaxRuntimeInSeconds": 3600},
    )
    described = boto3.client("sagemaker").describe_training_job(TrainingJobName=name)
    assert described["AlgorithmSpecification"]["TrainingImage"] == image
    return name


COMPILER_ON = {
    TrainingCompilerConfig.HP_ENABLE_COMPILER: "true",
    TrainingCompilerConfig.HP_ENABLE_DEBUG: "false",
}


@pytest.mark.parametrize(
    ("name", "image", "hyperparameters", "versions"),
    [
        ("aws-pytorch-23", PYTORCH_23, {}, ("2.3", "py311")),
        ("old-compiler-1131", OLD_COMPILER, COMPILER_ON, ("1.13.1", "py39")),
    ],
)
def test_pytorch_attaches_a_job_on_an_aws_image(
    role: str, name: str, image: str, hyperparameters: dict[str, str], versions: Any
) -> None:
    job = _job(name, image, role, hyperparameters)
    attached = trcomp.PyTorch.attach(job)
    sdk = sagemaker.pytorch.PyTorch.attach(job)  # what the SDK's own class makes of it
    # The job's own image. (The SDK's PyTorch rebuilds the URI from the versions, and
    # for the old compiler's job gets pytorch-training, not the image that ran.)
    assert attached.training_image_uri() == image
    assert (attached.framework_version, attached.py_version) == versions
    assert (sdk.framework_version, sdk.py_version) == versions
    assert attached.latest_training_job.name == job
    assert attached.entry_point == "train.py"
    assert attached.hyperparameters()["epochs"] == "3"
    if hyperparameters:
        assert attached.compiler_config == TrainingCompilerConfig(enabled=True, debug=False)
        for key, value in hyperparameters.items():
            assert attached.hyperparameters()[key] == sdk.hyperparameters()[key] == value
    else:
        assert attached.compiler_config is None


def test_huggingface_attaches_a_job_on_an_aws_image(role: str) -> None:
    job = _job("aws-hf-pytorch-23", HF_PYTORCH_23, role, {})
    attached = trcomp.HuggingFace.attach(job)
    sdk = sagemaker.huggingface.HuggingFace.attach(job)
    assert attached.training_image_uri() == HF_PYTORCH_23 == sdk.training_image_uri()
    for name in ("framework_version", "pytorch_version", "py_version"):
        assert getattr(attached, name) == getattr(sdk, name), name
    assert (attached.framework_version, attached.pytorch_version) == ("4.46.1", "2.3.0")


def test_huggingface_attaches_an_old_tensorflow_compiler_job_as_it_ran(role: str) -> None:
    # The old Training Compiler also compiled TensorFlow. attach() rebuilds such a
    # job as the SDK's class does: on its own image, with its tensorflow_version, and
    # its compiler hyperparameters passed on to that image (whose compiler read them);
    # trcomp's compiler_config stays None, since trcomp compiles PyTorch only.
    try:
        image = _aws_image(
            "huggingface",
            "4.17.0",
            "py38",
            base_framework_version="tensorflow2.6.3",
            training_compiler_config=sagemaker.huggingface.TrainingCompilerConfig(),
        )
    except ValueError as exc:
        pytest.skip(f"this SageMaker SDK has no URI for the old TensorFlow compiler: {exc}")
    job = _job("old-compiler-tf-263", image, role, COMPILER_ON)
    attached = trcomp.HuggingFace.attach(job)
    sdk = sagemaker.huggingface.HuggingFace.attach(job)
    # The job's own image; the SDK's class rebuilds the URI from the versions and gets
    # huggingface-tensorflow-training, not the compiler's image that ran.
    assert attached.training_image_uri() == image != sdk.training_image_uri()
    for name in ("framework_version", "tensorflow_version", "pytorch_version", "py_version"):
        assert getattr(attached, name) == getattr(sdk, name), name
    assert (attached.tensorflow_version, attached.pytorch_version) == ("2.6.3", None)
    assert attached.compiler_config is None
    for key, value in COMPILER_ON.items():
        assert attached.hyperparameters()[key] == sdk.hyperparameters()[key] == value
    assert attached.latest_training_job.name == job
