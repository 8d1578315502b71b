"""Drop-in behaviour for SageMaker SDK v2 users, checked against the AWS SDK's own classes.

Every comparison builds the real AWS objects (``sagemaker.training_compiler``,
``sagemaker.pytorch``, ``sagemaker.huggingface``) next to trcomp's; the
deliberate differences (docs/migration.md) are tested as differences.
"""

from __future__ import annotations

import json
import warnings

import boto3
import botocore.session
import pytest
import sagemaker.huggingface
import sagemaker.pytorch
from botocore.credentials import CredentialProvider, Credentials
from sagemaker.huggingface.training_compiler.config import (
    TrainingCompilerConfig as AwsHuggingFaceConfig,
)
from sagemaker.pytorch.training_compiler.config import TrainingCompilerConfig as AwsPyTorchConfig
from sagemaker.training_compiler.config import TrainingCompilerConfig as AwsConfig

import trcomp
from trcomp import CompilerConfigWarning, TrainingCompilerConfig, UnsupportedJobError
from trcomp.contract.instances import FAMILIES, GPUS, MIN_COMPUTE_CAPABILITY, describe_instance
from trcomp.image.uris import IMAGES, check_versions, image_tag, versions_from_image
from trcomp.remote import CredentialLeakError, prepare_remote_job

AWS_CLASSES = [AwsConfig, AwsPyTorchConfig, AwsHuggingFaceConfig]


def _pytorch(session, role, **kwargs):
    kwargs.setdefault("instance_type", "ml.g5.2xlarge")
    return trcomp.PyTorch(
        entry_point="train.py",
        role=role,
        instance_count=kwargs.pop("instance_count", 1),
        sagemaker_session=session,
        **kwargs,
    )


def _huggingface(session, role, **kwargs):
    kwargs.setdefault("instance_type", "ml.g5.2xlarge")
    return trcomp.HuggingFace(
        entry_point="train.py",
        role=role,
        instance_count=1,
        sagemaker_session=session,
        **kwargs,
    )


# -- 1. the config class ------------------------------------------------------------


@pytest.mark.parametrize("aws", AWS_CLASSES, ids=lambda c: c.__module__)
def test_class_attributes_match_the_aws_class(aws) -> None:
    for name in ("HP_ENABLE_COMPILER", "HP_ENABLE_DEBUG", "DEBUG_PATH"):
        assert getattr(TrainingCompilerConfig, name) == getattr(aws, name), name
    ours = TrainingCompilerConfig.SUPPORTED_INSTANCE_CLASS_PREFIXES
    assert isinstance(ours, list)
    # Every family AWS's compiler ran on runs on trcomp without a warning.
    assert set(aws.SUPPORTED_INSTANCE_CLASS_PREFIXES) <= set(ours)


@pytest.mark.parametrize("debug", [False, True])
def test_hyperparameter_names_and_values_match(debug: bool) -> None:
    aws = AwsPyTorchConfig(debug=debug)._to_hyperparameter_dict()
    ours = TrainingCompilerConfig(debug=debug)
    assert set(aws) == {ours.HP_ENABLE_COMPILER, ours.HP_ENABLE_DEBUG}
    encoded = ours.to_hyperparameters()
    assert {key: encoded[key] for key in aws} == {k: json.dumps(v) for k, v in aws.items()}
    # The third hyperparameter is trcomp's own (the whole config).
    assert set(encoded) - set(aws) == {TrainingCompilerConfig.HP_CONFIG}


def test_validate_is_the_aws_classmethod_not_pydantics() -> None:
    assert TrainingCompilerConfig.validate.__func__.__module__ == "trcomp.config"
    assert TrainingCompilerConfig.validate.__self__ is TrainingCompilerConfig


def _sdk_estimator(session, role, instance_type, **kwargs):
    """A plain SageMaker PyTorch estimator, as AWS's validate() was given one."""
    return sagemaker.pytorch.PyTorch(
        entry_point="train.py",
        role=role,
        instance_type=instance_type,
        instance_count=1,
        framework_version="1.13.1",
        py_version="py39",
        sagemaker_session=session,
        disable_profiler=True,
        **kwargs,
    )


def _outcome(validate, estimator) -> str:
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", CompilerConfigWarning)
            validate(estimator)
    except ValueError:
        return "refused"
    return "accepted"


@pytest.mark.parametrize(
    ("instance_type", "kwargs", "expected"),
    [
        ("ml.g5.2xlarge", {}, "accepted"),
        ("ml.p4d.24xlarge", {}, "accepted"),
        ("ml.p2.xlarge", {}, "refused"),
        ("ml.g4ad.4xlarge", {}, "refused"),
        ("ml.g3.4xlarge", {}, "refused"),
        ("ml.trn1.32xlarge", {}, "refused"),
        (
            "ml.p4d.24xlarge",
            {"distribution": {"smdistributed": {"dataparallel": {"enabled": True}}}},
            "refused",
        ),
    ],
)
def test_validate_agrees_with_aws(offline_session, role, instance_type, kwargs, expected) -> None:
    estimator = _sdk_estimator(offline_session, role, instance_type, **kwargs)
    assert _outcome(AwsConfig.validate, estimator) == expected
    assert _outcome(TrainingCompilerConfig.validate, estimator) == expected


@pytest.mark.parametrize("instance_type", ["local", "ml.p6.48xlarge"])
def test_validate_differs_on_purpose(offline_session, role, instance_type) -> None:
    # AWS refused local mode and every family outside its list; trcomp runs local
    # mode and warns about families it does not know (docs/migration.md).
    session = None if instance_type == "local" else offline_session
    estimator = _sdk_estimator(session, role, instance_type)
    assert _outcome(AwsConfig.validate, estimator) == "refused"
    assert _outcome(TrainingCompilerConfig.validate, estimator) == "accepted"


def test_pipeline_variable_instance_type_warns_as_aws_does(offline_session, role, monkeypatch):
    from sagemaker.workflow.parameters import ParameterString

    instance_type = ParameterString(name="TrainingInstance", default_value="ml.g5.xlarge")
    sdk = _sdk_estimator(offline_session, role, instance_type)
    assert _outcome(AwsConfig.validate, sdk) == "accepted"
    with pytest.warns(CompilerConfigWarning, match="pipeline variable.*when the pipeline runs"):
        ours = _pytorch(
            offline_session,
            role,
            instance_type=instance_type,
            compiler_config=TrainingCompilerConfig(),
        )
    monkeypatch.setattr(offline_session, "account_id", lambda: "111122223333")
    assert ours.training_image_uri().endswith(image_tag("2.9.0", "gpu"))


def test_validate_uses_the_estimators_config(offline_session, role) -> None:
    estimator = _pytorch(
        offline_session,
        role,
        compiler_config=TrainingCompilerConfig(),
        instance_type="ml.g5.xlarge",
    )
    estimator.distribution = {"pytorchxla": {"enabled": True}}
    with pytest.raises(UnsupportedJobError, match="backend is 'auto'"):
        TrainingCompilerConfig.validate(estimator)
    assert TrainingCompilerConfig.validate(_pytorch(offline_session, role)) is None


# -- 2. HuggingFace versions ----------------------------------------------------------


def test_huggingface_versions_mean_what_they_mean_in_the_sdk(offline_session, role) -> None:
    versions = {"transformers_version": "4.49.0", "pytorch_version": "2.5.1", "py_version": "py311"}
    sdk = sagemaker.huggingface.HuggingFace(
        entry_point="train.py",
        role=role,
        instance_type="ml.g5.2xlarge",
        instance_count=1,
        sagemaker_session=offline_session,
        **versions,
    )
    ours = _huggingface(offline_session, role, image_uri="me/hf-train:1", **versions)
    for name in ("framework_version", "pytorch_version", "tensorflow_version", "py_version"):
        assert getattr(ours, name) == getattr(sdk, name), name
    default = _huggingface(offline_session, role, compiler_config=TrainingCompilerConfig())
    assert default.framework_version == "4.57"
    assert default.pytorch_version == IMAGES[0].torch


def test_huggingface_image_is_chosen_by_the_torch_version(offline_session, role, monkeypatch):
    monkeypatch.setattr(offline_session, "account_id", lambda: "111122223333")
    estimator = _huggingface(offline_session, role, pytorch_version="2.9")
    assert estimator.training_image_uri().endswith(f"trcomp-training:{image_tag('2.9.0', 'gpu')}")


# -- 4. versions ------------------------------------------------------------------------


def test_old_aws_framework_version_is_refused_with_the_fix(offline_session, role) -> None:
    with pytest.raises(UnsupportedJobError) as caught:
        _pytorch(offline_session, role, framework_version="1.13.1", py_version="py39")
    message = str(caught.value)
    # Both pins of an old script, and both replacements, in one message.
    assert (
        "Replace framework_version='1.13.1', py_version='py39' with "
        "framework_version='2.9.0', py_version='py311'"
    ) in message
    assert "torch 2.9.0 with py311" in message and "image_uri=" in message


def test_old_aws_huggingface_versions_are_refused_with_the_fix(offline_session, role) -> None:
    with pytest.raises(UnsupportedJobError) as caught:
        _huggingface(
            offline_session,
            role,
            transformers_version="4.21.1",
            pytorch_version="1.11.0",
            py_version="py38",
        )
    message = str(caught.value)
    assert (
        "Replace pytorch_version='1.11.0', py_version='py38' with "
        "pytorch_version='2.9.0', py_version='py311'"
    ) in message
    assert "transformers_version='4.21.1' is passed on as it is" in message
    assert "requirements.txt" in message


def test_unknown_py_version_is_refused(offline_session, role) -> None:
    with pytest.raises(UnsupportedJobError, match=r"py_version='py27'.*py_version='py311'"):
        _pytorch(offline_session, role, py_version="py27")


def test_huggingface_pytorch_version_is_checked(offline_session, role) -> None:
    with pytest.raises(UnsupportedJobError, match=r"pytorch_version='1.11.0'.*torch 2.9.0"):
        _huggingface(offline_session, role, pytorch_version="1.11.0", transformers_version="4.21")


def test_own_image_keeps_the_users_versions(offline_session, role) -> None:
    estimator = _pytorch(
        offline_session, role, image_uri="me/train:1", framework_version="1.13.1", py_version="py39"
    )
    assert estimator.training_image_uri() == "me/train:1"
    assert estimator.framework_version == "1.13.1"


def test_version_table() -> None:
    for image in IMAGES:
        assert check_versions(image.torch, image.python) == image
        short = image.torch.rsplit(".", 1)[0]
        assert check_versions(short, None) == image
        uri = f"1.dkr.ecr.us-east-1.amazonaws.com/trcomp-training:{image_tag(image.torch, 'cpu')}"
        assert versions_from_image(uri) == image
    assert versions_from_image("763104351884.dkr.ecr.us-east-1.amazonaws.com/pytorch:2.0") is None


# -- 5. tensorflow_version ---------------------------------------------------------------


@pytest.mark.parametrize("image_uri", [None, "me/hf-train:1"])
def test_tensorflow_version_with_compiler_is_refused(offline_session, role, image_uri) -> None:
    with pytest.raises(UnsupportedJobError, match=r"tensorflow_version='2.6.3'.*PyTorch only"):
        _huggingface(
            offline_session,
            role,
            tensorflow_version="2.6.3",
            image_uri=image_uri,
            compiler_config=TrainingCompilerConfig(),
        )


def test_tensorflow_version_says_what_would_happen(offline_session, role) -> None:
    with pytest.raises(UnsupportedJobError) as on_ours:
        _huggingface(offline_session, role, tensorflow_version="2.6.3", pytorch_version=None)
    assert "its image has no TensorFlow" in str(on_ours.value)
    assert "pytorch_version='2.9.0'" in str(on_ours.value)
    with pytest.raises(UnsupportedJobError) as on_own:
        _huggingface(
            offline_session,
            role,
            tensorflow_version="2.6.3",
            pytorch_version=None,
            image_uri="me/tf:1",
            compiler_config=TrainingCompilerConfig(),
        )
    message = str(on_own.value)
    # The job keeps the user's image: it would not become a PyTorch job.
    assert "me/tf:1" in message and "Leave compiler_config out" in message
    assert "silently become" not in message


@pytest.mark.parametrize("maker", [_huggingface, _pytorch])
@pytest.mark.parametrize("image_uri", [None, "me/train:1"])
def test_mxnet_version_is_refused_with_the_replacement(
    offline_session, role, maker, image_uri, tmp_path, monkeypatch
) -> None:
    # The SDK's classes take mxnet_version in **kwargs and ignore it: the job would be
    # PyTorch 2.9.0 without a word. Refused in the constructor, before any upload.
    monkeypatch.setattr(
        offline_session, "upload_data", lambda *a, **k: pytest.fail("uploaded something")
    )
    argument = "pytorch_version" if maker is _huggingface else "framework_version"
    with pytest.raises(UnsupportedJobError) as caught:
        maker(
            offline_session,
            role,
            mxnet_version="1.9.0",
            image_uri=image_uri,
            compiler_config=TrainingCompilerConfig(),
        )
    message = str(caught.value)
    assert message.startswith("mxnet_version='1.9.0': ")
    assert f"Pass {argument}='2.9.0' instead" in message


def test_mxnet_version_none_is_nothing(offline_session, role) -> None:
    estimator = _huggingface(offline_session, role, mxnet_version=None)
    assert estimator.pytorch_version == IMAGES[0].torch
    assert not hasattr(estimator, "mxnet_version")


def test_tensorflow_version_with_own_image_and_no_compiler_is_the_sdks(offline_session, role):
    estimator = _huggingface(
        offline_session,
        role,
        tensorflow_version="2.6.3",
        pytorch_version=None,
        transformers_version="4.17.0",
        image_uri="me/tf:1",
    )
    assert estimator.tensorflow_version == "2.6.3"


# -- 6. the credential guard -------------------------------------------------------------


class _Secret:
    """What a custom credential provider (or a test double) may hand out instead of str."""

    def __repr__(self) -> str:
        return "_Secret()"


class _ObjectProvider(CredentialProvider):
    METHOD = "trcomp-test-objects"

    def load(self) -> Credentials:
        return Credentials(_Secret(), _Secret(), _Secret(), method=self.METHOD)


def _object_credentials_session(region: str = "eu-west-1") -> boto3.Session:
    core = botocore.session.Session()
    core.get_component("credential_provider").insert_before("env", _ObjectProvider())
    return boto3.Session(botocore_session=core, region_name=region)


def test_credential_guard_accepts_non_string_credentials(role) -> None:
    session = sagemaker.Session(boto_session=_object_credentials_session())
    frozen = session.boto_session.get_credentials().get_frozen_credentials()
    assert isinstance(frozen.secret_key, _Secret)
    estimator = _pytorch(
        session, role, compiler_config=TrainingCompilerConfig(cache=False), hyperparameters={}
    )
    prepare_remote_job(estimator.job_spec(), estimator)  # raised TypeError before
    estimator.set_hyperparameters(aws_secret_access_key="x")
    with pytest.raises(CredentialLeakError, match="aws_secret_access_key"):
        prepare_remote_job(estimator.job_spec(), estimator)


# -- 7. instance families ----------------------------------------------------------------


@pytest.mark.parametrize(
    ("instance_type", "reason"),
    [
        ("ml.p2.xlarge", r"NVIDIA K80 GPUs \(compute capability 3.7\).*triton"),
        ("ml.g3.4xlarge", r"NVIDIA M60 GPUs \(compute capability 5.2\)"),
        ("ml.g3s.xlarge", r"NVIDIA M60 GPUs"),
        ("ml.g4ad.4xlarge", r"AMD Radeon Pro V520 GPUs.*only drives NVIDIA GPUs"),
    ],
)
def test_gpus_torch_cannot_use_are_refused(offline_session, role, instance_type, reason) -> None:
    with pytest.raises(UnsupportedJobError, match=reason):
        _pytorch(
            offline_session,
            role,
            instance_type=instance_type,
            compiler_config=TrainingCompilerConfig(),
        )


def test_gpu_table_agrees_with_the_families() -> None:
    for family, gpu in GPUS.items():
        kind = FAMILIES[family]
        assert kind == ("gpu" if gpu.usable else "unusable_gpu"), family
        assert describe_instance(f"ml.{family}.xlarge").gpu == gpu
    for family, kind in FAMILIES.items():
        if kind in ("gpu", "unusable_gpu"):
            assert family in GPUS, family
    assert all(
        gpu.compute_capability >= MIN_COMPUTE_CAPABILITY
        for gpu in GPUS.values()
        if gpu.usable and gpu.compute_capability
    )
