"""trcomp.v3.ModelTrainer without AWS: what it refuses, and the job it builds locally."""

from __future__ import annotations

import json
import os
import threading
from functools import partial
from pathlib import Path

import pytest

pytest.importorskip(
    "sagemaker.train.model_trainer", reason="needs the SageMaker SDK v3: run make test-v3"
)

import yaml
from sagemaker.core.training.configs import Compute, SourceCode
from sagemaker.train.distributed import MPI, Torchrun
from sagemaker.train.model_trainer import Mode

from trcomp import TrainingCompilerConfig, UnsupportedJobError
from trcomp.v3 import ModelTrainer
from trcomp.v3.trainer import telemetry_off

pytestmark = pytest.mark.usefixtures("clean_sdk_env")
INDUCTOR = TrainingCompilerConfig(backend="inductor")


def local_trainer(source_dir: Path, root: Path, **kwargs) -> ModelTrainer:
    options = {
        "training_mode": Mode.LOCAL_CONTAINER,
        "source_code": SourceCode(source_dir=str(source_dir), entry_script="loop.py"),
        "compute": Compute(instance_type="local_cpu", instance_count=1),
        "local_container_root": str(root),
        "compiler_config": INDUCTOR,
        **kwargs,
    }
    return ModelTrainer(**options)


def test_local_trainer_defaults_to_our_local_image(source_dir, tmp_path, monkeypatch) -> None:
    assert local_trainer(source_dir, tmp_path).training_image == "trcomp-training:latest"
    monkeypatch.setenv("TRCOMP_LOCAL_IMAGE", "trcomp-training:mine")
    assert local_trainer(source_dir, tmp_path).training_image == "trcomp-training:mine"
    own = local_trainer(source_dir, tmp_path, training_image="me/mine:1")
    assert own.training_image == "me/mine:1"


@pytest.mark.parametrize(
    ("version", "tag"),
    [
        (None, "trcomp-training:latest"),
        ("2.9", "trcomp-training:latest"),
        ("2.14", "trcomp-training:torch2.14.1"),
        ("2.14.1", "trcomp-training:torch2.14.1"),
    ],
)
def test_framework_version_picks_the_local_tag(source_dir, tmp_path, version, tag) -> None:
    trainer = local_trainer(source_dir, tmp_path, framework_version=version)
    assert trainer.training_image == tag
    assert trainer._create_training_job_args()["algorithm_specification"].training_image == tag


def test_an_unknown_framework_version_is_refused_with_what_to_pass(source_dir, tmp_path) -> None:
    with pytest.raises(UnsupportedJobError) as caught:
        local_trainer(source_dir, tmp_path, framework_version="2.13")
    message = str(caught.value)
    assert "trcomp builds no image for torch 2.13" in message
    assert "Replace framework_version='2.13' with framework_version='2.9.0'" in message
    assert "pass training_image= an image of your own" in message


def test_xla_on_2_14_is_refused_locally_with_the_replacement(source_dir, tmp_path) -> None:
    xla = TrainingCompilerConfig(backend="xla", xla_engine="torch_xla")
    with pytest.raises(UnsupportedJobError, match=r"Pass framework_version='2.9' to keep XLA"):
        local_trainer(source_dir, tmp_path, framework_version="2.14", compiler_config=xla)


def test_with_the_users_image_the_version_is_the_users_business(source_dir, tmp_path) -> None:
    # As the v2 estimators with image_uri=: neither the version nor XLA on it is checked.
    xla = TrainingCompilerConfig(backend="xla", xla_engine="torch_xla")
    for version in ("2.14", "2.13"):
        trainer = local_trainer(
            source_dir,
            tmp_path,
            training_image="me/mine:xla",
            framework_version=version,
            compiler_config=xla,
        )
        assert trainer.training_image == "me/mine:xla"


def test_the_local_job_runs_the_image_entrypoint_with_the_compiler(source_dir, tmp_path) -> None:
    trainer = local_trainer(
        source_dir,
        tmp_path,
        hyperparameters={"steps": 4, "lr": "1e-3"},
        distributed=Torchrun(process_count_per_node=2),
    )
    # The one builder our class overrides; train() sends exactly this to docker compose.
    request = trainer._create_training_job_args()
    spec = request["algorithm_specification"]
    assert spec.container_entrypoint is None and spec.container_arguments is None
    assert spec.training_image == "trcomp-training:latest"
    hps = request["hyper_parameters"]
    assert hps["steps"] == "4" and hps["lr"] == "1e-3"  # v3's encoding: str as is, else JSON
    assert hps["sagemaker_program"] == "loop.py"
    assert hps["sagemaker_submit_directory"] == "/opt/ml/input/data/code"
    assert hps["sagemaker_torch_distributed_enabled"] == "true"
    assert INDUCTOR.to_hyperparameters().items() <= hps.items()
    channels = {c.channel_name: c for c in request["input_data_config"]}
    assert set(channels) == {"code", "trcomp_checkpoints"}  # no sm_drivers: v3's driver is off
    code = channels["code"].data_source.file_system_data_source.directory_path
    assert code == str(source_dir.resolve())
    cache = channels["trcomp_checkpoints"].data_source.file_system_data_source.directory_path
    assert cache == str(tmp_path / "trcomp-checkpoints") and Path(cache).is_dir()
    assert request["environment"] == {
        "TRCOMP_NPROC_PER_NODE": "2",
        "TRCOMP_CHECKPOINT_DIR": "/opt/ml/input/data/trcomp_checkpoints",
        "TRCOMP_CHECKPOINT_URI": (tmp_path / "trcomp-checkpoints").resolve().as_uri(),
    }
    # The trainer itself is left as the user built it.
    assert trainer.source_code is not None and trainer.hyperparameters == {"steps": 4, "lr": "1e-3"}


def test_without_compiler_cache_no_cache_dir(source_dir, tmp_path) -> None:
    trainer = local_trainer(source_dir, tmp_path, compiler_config=None)
    request = trainer._create_training_job_args()
    assert [c.channel_name for c in request["input_data_config"]] == ["code"]
    assert "sagemaker_training_compiler_config" not in request["hyper_parameters"]
    assert not (tmp_path / "trcomp-checkpoints").exists()


@pytest.mark.parametrize(
    ("source", "match"),
    [
        ({"command": "python loop.py"}, "SourceCode.command"),
        ({"entry_script": "loop.py", "args": ["--steps", 3]}, "SourceCode.args"),
        ({"entry_script": "loop.py", "requirements": "deps/reqs.txt"}, "requirements.txt"),
        ({"entry_script": "missing.py"}, "not a file in source_dir"),
    ],
)
def test_what_cannot_be_carried_over_is_refused(source_dir, tmp_path, source, match) -> None:
    with pytest.raises(UnsupportedJobError, match=match):
        local_trainer(
            source_dir, tmp_path, source_code=SourceCode(source_dir=str(source_dir), **source)
        )


def test_requirements_txt_at_the_top_is_accepted(source_dir, tmp_path) -> None:
    (source_dir / "requirements.txt").write_text("")
    code = SourceCode(
        source_dir=str(source_dir), entry_script="loop.py", requirements="requirements.txt"
    )
    assert local_trainer(source_dir, tmp_path, source_code=code).source_code is code


def test_no_source_code_and_archives_are_refused(source_dir, tmp_path) -> None:
    with pytest.raises(UnsupportedJobError, match="needs source_code"):
        local_trainer(source_dir, tmp_path, source_code=None)
    archive = SourceCode(source_dir="s3://bucket/code.tar.gz", entry_script="loop.py")
    with pytest.raises(UnsupportedJobError, match="archive"):
        local_trainer(source_dir, tmp_path, source_code=archive)


def test_mpi_and_smp_are_refused_with_the_v2_reason(source_dir, tmp_path) -> None:
    # With the compiler on, the shared validation speaks (the v2 estimators' message).
    with pytest.raises(UnsupportedJobError, match="MPI launches are not supported"):
        local_trainer(source_dir, tmp_path, distributed=MPI())
    with pytest.raises(UnsupportedJobError, match="distributed=MPI"):
        local_trainer(source_dir, tmp_path, distributed=MPI(), compiler_config=None)


def test_a_local_container_job_refuses_a_directory_shared_cache_before_it_starts(
    source_dir, tmp_path
) -> None:
    from trcomp.contract.errors import LocalModeError

    config = TrainingCompilerConfig(backend="inductor", shared_cache=f"file://{tmp_path}/c")
    trainer = local_trainer(source_dir, tmp_path / "root", compiler_config=config)
    with pytest.raises(LocalModeError, match="Docker local mode does not mount"):
        trainer.train(dry_run=True)
    assert not (tmp_path / "root").exists()  # nothing was written for the job


def test_reserved_channel_names_are_refused(source_dir, tmp_path) -> None:
    from sagemaker.core.training.configs import InputData

    trainer = local_trainer(source_dir, tmp_path)
    with pytest.raises(UnsupportedJobError, match="'code' is taken"):
        trainer._create_training_job_args(
            [InputData(channel_name="code", data_source=str(tmp_path))]
        )


def test_telemetry_off_writes_an_opt_out_and_restores_the_user_config(
    tmp_path, monkeypatch
) -> None:
    mine = tmp_path / "mine.yaml"
    mine.write_text(
        yaml.safe_dump({"SchemaVersion": "1.0", "SageMaker": {"TrainingJob": {"RoleArn": "r"}}})
    )
    monkeypatch.setenv("SAGEMAKER_USER_CONFIG_OVERRIDE", str(mine))
    with telemetry_off() as path:
        assert os.environ["SAGEMAKER_USER_CONFIG_OVERRIDE"] == str(path)
        merged = yaml.safe_load(path.read_text())
    assert merged["SageMaker"]["PythonSDK"]["Modules"]["TelemetryOptOut"] is True
    assert merged["SageMaker"]["TrainingJob"] == {"RoleArn": "r"}
    assert os.environ["SAGEMAKER_USER_CONFIG_OVERRIDE"] == str(mine) and not path.exists()
    monkeypatch.delenv("SAGEMAKER_USER_CONFIG_OVERRIDE")
    with telemetry_off() as path:
        assert json.dumps(yaml.safe_load(path.read_text())).count("TelemetryOptOut") == 1
    assert "SAGEMAKER_USER_CONFIG_OVERRIDE" not in os.environ


def test_the_v3_sdk_reads_our_opt_out() -> None:
    from sagemaker.core.config.config import load_sagemaker_config

    with telemetry_off():
        config = load_sagemaker_config()
    assert config["SageMaker"]["PythonSDK"]["Modules"]["TelemetryOptOut"] is True


def test_the_v2_estimators_say_what_to_install() -> None:
    import trcomp

    with pytest.raises(ImportError, match=r"trcomp\[sdk-v2\]"):
        trcomp.PyTorch  # noqa: B018


def _telemetry_requests(trainer: ModelTrainer, train, monkeypatch) -> list[str]:
    """What reaches AWS while ``train(dry_run=True)`` runs (v3 emits telemetry on train)."""
    from tests.helpers.aws import FAKE_CREDENTIALS, aws_error_server

    for key, value in {**FAKE_CREDENTIALS, "AWS_DEFAULT_REGION": "us-west-2"}.items():
        monkeypatch.setenv(key, value)
    with aws_error_server() as aws:
        monkeypatch.setenv("AWS_ENDPOINT_URL", aws.url)
        train(dry_run=True)
        for thread in threading.enumerate():
            if thread.name == "sagemaker-telemetry":
                thread.join(timeout=30)
    return aws.received


def test_local_mode_sends_no_telemetry(source_dir, tmp_path, monkeypatch) -> None:
    from sagemaker.train.model_trainer import ModelTrainer as V3ModelTrainer

    trainer = local_trainer(source_dir, tmp_path)
    # v3's own train() asks STS for the account to send telemetry; ours opts out.
    assert _telemetry_requests(trainer, partial(V3ModelTrainer.train, trainer), monkeypatch)
    assert _telemetry_requests(trainer, trainer.train, monkeypatch) == []
