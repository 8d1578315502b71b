"""xla_engine: the codec, the engine each host gets, and what the jax engine refuses."""

from __future__ import annotations

import json
import warnings

import pytest

from trcomp import CompilerConfigWarning, HuggingFace, PyTorch, TrainingCompilerConfig
from trcomp.contract.errors import CompilerConfigError, UnsupportedJobError
from trcomp.contract.keys import CONFIG_KEY


def make(session, role, instance_type, config, cls=PyTorch, **kwargs):
    return cls(
        entry_point="train.py",
        role=role,
        instance_type=instance_type,
        instance_count=kwargs.pop("instance_count", 1),
        compiler_config=config,
        sagemaker_session=session,
        **kwargs,
    )


def test_default_engine_is_left_out_so_older_containers_read_the_config() -> None:
    body = json.loads(TrainingCompilerConfig(backend="xla").to_hyperparameters()[CONFIG_KEY])
    assert "xla_engine" not in body
    body = json.loads(
        TrainingCompilerConfig(backend="xla", xla_engine="jax").to_hyperparameters()[CONFIG_KEY]
    )
    assert body["xla_engine"] == "jax"


def test_engine_round_trips_and_legacy_keys_still_work_alone() -> None:
    config = TrainingCompilerConfig(backend="xla", xla_engine="jax")
    assert TrainingCompilerConfig.from_hyperparameters(config.to_hyperparameters()) == config
    legacy = TrainingCompilerConfig.from_hyperparameters(
        {"sagemaker_training_compiler_enabled": "true"}
    )
    assert legacy.xla_engine == "auto"


def test_a_container_without_the_field_names_both_versions() -> None:
    """What an older container does with the new field: its versioned unknown-field error."""
    body = {"trcomp_version": "9.9.9", "enabled": True, "xla_engine_v2": "jax"}
    with pytest.raises(CompilerConfigError, match=r"'xla_engine_v2'.*trcomp 9\.9\.9"):
        TrainingCompilerConfig.from_hyperparameters({CONFIG_KEY: json.dumps(body)})


@pytest.mark.parametrize(
    ("engine", "gpu", "expected"),
    [
        ("auto", True, "jax"),
        ("auto", False, "torch_xla"),
        ("jax", False, "jax"),
        ("torch_xla", True, "torch_xla"),
    ],
)
def test_engine_for_host(engine, gpu, expected) -> None:
    config = TrainingCompilerConfig(backend="xla", xla_engine=engine)
    assert config.engine_for(nvidia_gpu=gpu) == expected


def test_engine_with_inductor_is_an_error() -> None:
    with pytest.raises(CompilerConfigError, match="xla_engine='jax' only applies to backend='xla'"):
        TrainingCompilerConfig(backend="inductor", xla_engine="jax")


def test_xla_on_gpu_runs_the_jax_engine_with_a_warning(offline_session, role) -> None:
    with pytest.warns(CompilerConfigWarning, match=r"jax engine.*experimental.*compile_step"):
        make(offline_session, role, "ml.p5.48xlarge", TrainingCompilerConfig(backend="xla"))


def test_torch_xla_engine_on_gpu_keeps_the_cuda_rule(offline_session, role) -> None:
    config = TrainingCompilerConfig(backend="xla", xla_engine="torch_xla")
    with pytest.raises(UnsupportedJobError, match="no CUDA"):
        make(offline_session, role, "ml.g5.2xlarge", config)


def test_jax_engine_on_cpu_is_allowed(role) -> None:
    with pytest.warns(CompilerConfigWarning, match="jax engine"):
        make(None, role, "local_process", TrainingCompilerConfig(backend="xla", xla_engine="jax"))
    with warnings.catch_warnings():
        warnings.simplefilter("error", CompilerConfigWarning)
        make(None, role, "local_process", TrainingCompilerConfig(backend="xla"))


@pytest.mark.parametrize("name", ["torch_distributed", "pytorchddp", "pytorchxla"])
def test_process_per_device_distributions_are_refused(offline_session, role, name) -> None:
    with pytest.raises(UnsupportedJobError, match=f"{name}.*one process"):
        make(
            offline_session,
            role,
            "ml.p4d.24xlarge",
            TrainingCompilerConfig(backend="xla"),
            distribution={name: {"enabled": True}},
        )


def test_several_hosts_are_refused(offline_session, role) -> None:
    with pytest.raises(UnsupportedJobError, match=r"instance_count=2.*multi-host"):
        make(
            offline_session,
            role,
            "ml.p4d.24xlarge",
            TrainingCompilerConfig(backend="xla"),
            instance_count=2,
        )


def test_hugging_face_with_the_jax_engine_is_refused(offline_session, role) -> None:
    with pytest.raises(UnsupportedJobError, match=r"HF Trainer.*backend='inductor'"):
        make(
            offline_session,
            role,
            "ml.g5.2xlarge",
            TrainingCompilerConfig(backend="xla"),
            HuggingFace,
        )
