"""The estimators: final hyperparameters, image URIs, sessions, AWS config migration."""

from __future__ import annotations

import json
import logging
import subprocess
import sys

import pytest

from trcomp import (
    Estimator,
    HuggingFace,
    HyperparameterLimitError,
    PyTorch,
    TrainingCompilerConfig,
)
from trcomp.contract.keys import CONFIG_KEY, DEBUG_KEY, ENABLED_KEY
from trcomp.contract.metrics import METRICS
from trcomp.image.uris import LOCAL_IMAGE, device_for_instance, image_tag, remote_image_uri


def test_import_trcomp_is_light() -> None:
    code = (
        "import sys, trcomp; "
        "print(sorted(m for m in ('torch', 'torch_xla', 'sagemaker') if m in sys.modules))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"


def test_pytorch_hyperparameters(offline_session, role) -> None:
    est = PyTorch(
        entry_point="train.py",
        role=role,
        instance_type="ml.g5.2xlarge",
        instance_count=2,
        hyperparameters={"epochs": 3, "lr": 0.1},
        distribution={"torch_distributed": {"enabled": True}},
        compiler_config=TrainingCompilerConfig(mode="max-autotune"),
        sagemaker_session=offline_session,
    )
    hps = est.hyperparameters()
    assert hps["epochs"] == "3" and hps["lr"] == "0.1"
    assert hps[ENABLED_KEY] == "true" and hps[DEBUG_KEY] == "false"
    assert json.loads(hps[CONFIG_KEY])["mode"] == "max-autotune"
    assert hps["sagemaker_torch_distributed_enabled"] == "true"
    assert hps["sagemaker_instance_type"] == '"ml.g5.2xlarge"'
    assert TrainingCompilerConfig.from_hyperparameters(hps).mode == "max-autotune"


def test_pytorchddp_is_kept_as_plain_ddp(offline_session, role) -> None:
    est = PyTorch(
        entry_point="train.py",
        role=role,
        instance_type="ml.p4d.24xlarge",
        instance_count=2,
        distribution={"pytorchddp": {"enabled": True}},
        compiler_config=TrainingCompilerConfig(),
        sagemaker_session=offline_session,
    )
    hps = est.hyperparameters()
    assert hps["sagemaker_pytorch_ddp_enabled"] == "true"
    assert "sagemaker_distributed_dataparallel_enabled" not in hps


def test_no_config_means_no_compiler_keys(offline_session, role) -> None:
    est = PyTorch(
        entry_point="t.py",
        role=role,
        instance_type="ml.g5.xlarge",
        instance_count=1,
        sagemaker_session=offline_session,
    )
    assert not any(k.startswith("sagemaker_training_compiler") for k in est.hyperparameters())


def test_metric_definitions_merged(offline_session, role) -> None:
    mine = {"Name": "loss", "Regex": "loss=([0-9.]+)"}
    est = PyTorch(
        entry_point="t.py",
        role=role,
        instance_type="ml.g5.xlarge",
        instance_count=1,
        metric_definitions=[mine],
        compiler_config=TrainingCompilerConfig(),
        sagemaker_session=offline_session,
    )
    names = [m["Name"] for m in est.metric_definitions]
    assert names[0] == "loss"
    assert {f"trcomp:{n}" for n in METRICS} <= set(names)


def test_huggingface_estimator(offline_session, role) -> None:
    est = HuggingFace(
        entry_point="train.py",
        role=role,
        instance_type="ml.g5.2xlarge",
        instance_count=1,
        compiler_config=TrainingCompilerConfig(debug=True),
        sagemaker_session=offline_session,
    )
    hps = est.hyperparameters()
    assert hps[DEBUG_KEY] == "true"
    # As in the SDK: framework_version is the transformers version.
    assert (est.framework_version, est.pytorch_version) == ("4.57", "2.9.0")


def test_bring_your_own_image_estimator(offline_session, role) -> None:
    est = Estimator(
        image_uri="me/my-image:1",
        entry_point="train.py",
        role=role,
        instance_type="ml.g5.2xlarge",
        instance_count=2,
        distribution={"torch_distributed": {"enabled": True}},
        compiler_config=TrainingCompilerConfig(),
        sagemaker_session=offline_session,
    )
    assert est.training_image_uri() == "me/my-image:1"
    hps = est.hyperparameters()
    assert hps["sagemaker_torch_distributed_enabled"] == "true"
    assert hps[ENABLED_KEY] == "true"


def test_one_writer_of_the_compiler_hyperparameters(offline_session, role) -> None:
    config = TrainingCompilerConfig(mode="max-autotune", debug=True)
    common = {
        "entry_point": "train.py",
        "role": role,
        "instance_type": "ml.g5.2xlarge",
        "instance_count": 1,
        "compiler_config": config,
        "sagemaker_session": offline_session,
    }
    keys = (ENABLED_KEY, DEBUG_KEY, CONFIG_KEY)
    expected = config.to_hyperparameters()
    for cls in (PyTorch, HuggingFace, Estimator):
        est = cls(**common)
        # The SDK's framework estimators write the keys (from the config's
        # _to_hyperparameter_dict()); trcomp writes them only where the SDK does not.
        sdk_writes = cls is not Estimator
        assert est._trcomp_compiler_hyperparameters() == ({} if sdk_writes else expected)
        assert {key: est.hyperparameters()[key] for key in keys} == expected, cls.__name__


def test_job_spec_describes_the_estimator(offline_session, role) -> None:
    config = TrainingCompilerConfig()
    est = PyTorch(
        entry_point="train.py",
        source_dir="src",
        role=role,
        instance_type="ml.g5.12xlarge",
        instance_count=2,
        distribution={"torch_distributed": {"enabled": True}},
        output_path="s3://bucket/out",
        checkpoint_s3_uri="s3://bucket/ckpt",
        checkpoint_local_path="/opt/ml/c",
        environment={"A": "1"},
        compiler_config=config,
        sagemaker_session=offline_session,
    )
    spec = est.job_spec()
    assert spec.compiler_config is config
    assert (spec.instance_type, spec.instance_count) == ("ml.g5.12xlarge", 2)
    assert spec.distribution == {"torch_distributed": {"enabled": True}}
    assert (spec.entry_point, spec.source_dir) == ("train.py", "src")
    assert (spec.output_path, spec.checkpoint_s3_uri) == ("s3://bucket/out", "s3://bucket/ckpt")
    assert spec.checkpoint_local_path == "/opt/ml/c" and spec.environment == {"A": "1"}
    # trcomp's default SageMaker image needs an STS call: left out until fit().
    assert spec.image_is_default and spec.image_uri is None
    with pytest.raises(ValueError, match="frozen"):
        spec.instance_count = 3  # type: ignore[misc]
    own = PyTorch(**{**_BASIC, "image_uri": "me/img:1"}, sagemaker_session=offline_session)
    assert own.job_spec().image_uri == "me/img:1" and not own.job_spec().image_is_default


_BASIC = {
    "entry_point": "train.py",
    "role": "arn:aws:iam::111111111111:role/x",
    "instance_type": "ml.g5.2xlarge",
    "instance_count": 1,
}


def test_remote_default_image_is_resolved_lazily(offline_session, role, monkeypatch) -> None:
    calls: list[int] = []

    def account_id() -> str:
        calls.append(1)
        return "444455556666"

    monkeypatch.setattr(offline_session, "account_id", account_id)
    est = PyTorch(
        entry_point="t.py",
        role=role,
        instance_type="ml.g5.2xlarge",
        instance_count=1,
        compiler_config=TrainingCompilerConfig(),
        sagemaker_session=offline_session,
    )
    assert calls == []  # nothing reached AWS in the constructor
    expected = (
        f"444455556666.dkr.ecr.eu-west-1.amazonaws.com/trcomp-training:{image_tag('2.9.0', 'gpu')}"
    )
    assert est.training_image_uri() == expected
    assert est.image_uri == expected and calls == [1]


def test_explicit_image_wins(offline_session, role) -> None:
    est = PyTorch(
        entry_point="t.py",
        role=role,
        instance_type="ml.g5.2xlarge",
        instance_count=1,
        image_uri="1.dkr.ecr.us-east-1.amazonaws.com/mine:2",
        compiler_config=TrainingCompilerConfig(),
        sagemaker_session=offline_session,
    )
    assert est.training_image_uri() == "1.dkr.ecr.us-east-1.amazonaws.com/mine:2"


def test_image_uris(monkeypatch) -> None:
    assert remote_image_uri("us-west-2", "1", "2.9.0", "cpu").endswith(
        "trcomp-training:0.1.0-torch2.9.0-cpu"
    )
    assert ".amazonaws.com.cn/" in remote_image_uri("cn-north-1", "1")
    monkeypatch.setenv("TRCOMP_IMAGE_URI", "x/y:z")
    assert remote_image_uri("us-west-2", "1") == "x/y:z"
    assert device_for_instance("ml.c5.xlarge") == "cpu"
    assert device_for_instance("ml.p5.48xlarge") == "gpu"
    assert device_for_instance("local_gpu") == "gpu"


def test_local_mode_is_offline(role, monkeypatch) -> None:
    monkeypatch.delenv("AWS_DEFAULT_REGION", raising=False)
    monkeypatch.delenv("AWS_REGION", raising=False)
    est = PyTorch(
        entry_point="t.py",
        role=role,
        instance_type="local",
        instance_count=1,
        compiler_config=TrainingCompilerConfig(),
    )
    session = est.sagemaker_session
    assert session.local_mode and session.config["local"]["local_code"] is True
    assert session.boto_region_name == "us-east-1"
    assert session.sagemaker_config["SageMaker"]["PythonSDK"]["Modules"]["TelemetryOptOut"] is True
    assert est.training_image_uri() == LOCAL_IMAGE


def test_aws_config_is_converted(offline_session, role, caplog) -> None:
    from sagemaker.pytorch import TrainingCompilerConfig as AwsConfig

    with caplog.at_level(logging.INFO, logger="trcomp"):
        est = PyTorch(
            entry_point="t.py",
            role=role,
            instance_type="ml.g5.2xlarge",
            instance_count=1,
            compiler_config=AwsConfig(debug=True),
            sagemaker_session=offline_session,
        )
    assert est.compiler_config == TrainingCompilerConfig(debug=True)
    assert "converted sagemaker" in caplog.text


def test_wrong_config_type(offline_session, role) -> None:
    with pytest.raises(ValueError, match=r"must be a trcomp\.TrainingCompilerConfig, got dict"):
        PyTorch(
            entry_point="t.py",
            role=role,
            instance_type="ml.g5.2xlarge",
            instance_count=1,
            compiler_config={"enabled": True},
            sagemaker_session=offline_session,
        )


def test_hyperparameter_count_limit(offline_session, role) -> None:
    est = PyTorch(
        entry_point="t.py",
        role=role,
        instance_type="ml.g5.2xlarge",
        instance_count=1,
        hyperparameters={f"h{i}": i for i in range(99)},
        compiler_config=TrainingCompilerConfig(),
        sagemaker_session=offline_session,
    )
    with pytest.raises(HyperparameterLimitError, match="SageMaker accepts at most 100"):
        est.hyperparameters()


def test_hyperparameter_key_limit(offline_session, role) -> None:
    est = PyTorch(
        entry_point="t.py",
        role=role,
        instance_type="ml.g5.2xlarge",
        instance_count=1,
        hyperparameters={"k" * 257: 1},
        sagemaker_session=offline_session,
    )
    with pytest.raises(HyperparameterLimitError, match="at most 256: use a shorter name"):
        est.hyperparameters()
