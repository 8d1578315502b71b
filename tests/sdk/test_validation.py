"""validate_for: every rule of the instance, distribution and observer checks."""

from __future__ import annotations

import warnings

import pytest

from trcomp import CompilerConfigWarning, PyTorch, TrainingCompilerConfig, UnsupportedJobError
from trcomp.contract.instances import FAMILIES, describe_instance


def make(session, role, instance_type="ml.g5.2xlarge", config=None, **kwargs):
    return PyTorch(
        entry_point="train.py",
        role=role,
        instance_type=instance_type,
        instance_count=kwargs.pop("instance_count", 1),
        compiler_config=config or TrainingCompilerConfig(),
        sagemaker_session=session,
        **kwargs,
    )


def quietly(fn, *args, **kwargs):
    with warnings.catch_warnings():
        warnings.simplefilter("error", CompilerConfigWarning)
        return fn(*args, **kwargs)


@pytest.mark.parametrize(
    "instance_type",
    [f"ml.{family}.2xlarge" for family, kind in FAMILIES.items() if kind == "gpu"],
)
def test_gpu_families_pass_silently(offline_session, role, instance_type) -> None:
    quietly(make, offline_session, role, instance_type)


@pytest.mark.parametrize("instance_type", ["local", "local_gpu", "local_process"])
def test_local_modes_pass(role, instance_type) -> None:
    quietly(make, None, role, instance_type)


def test_cpu_family_warns(offline_session, role) -> None:
    with pytest.warns(CompilerConfigWarning, match="CPU instance: compilers rarely speed up"):
        make(offline_session, role, "ml.c5.4xlarge")


@pytest.mark.parametrize(
    "instance_type", ["ml.trn1.32xlarge", "ml.inf2.xlarge", "ml.trn2.48xlarge"]
)
def test_neuron_families_are_refused(offline_session, role, instance_type) -> None:
    with pytest.raises(UnsupportedJobError, match=r"Trainium/Inferentia.*Neuron SDK"):
        make(offline_session, role, instance_type)


def test_unknown_family_warns_but_runs(offline_session, role) -> None:
    with pytest.warns(CompilerConfigWarning, match="does not know the instance family 'p6'"):
        make(offline_session, role, "ml.p6.48xlarge")


def test_families_classify() -> None:
    assert describe_instance("ml.p4de.24xlarge").kind == "gpu"
    assert describe_instance("local_gpu").has_nvidia_gpu
    assert not describe_instance("local").has_nvidia_gpu
    assert describe_instance("weird").kind == "unknown"


@pytest.mark.parametrize(
    "distribution",
    [
        None,
        {"torch_distributed": {"enabled": True}},
        {"pytorchddp": {"enabled": True}},
        {"mpi": {"enabled": False}},
    ],
)
def test_accepted_distributions(offline_session, role, distribution) -> None:
    quietly(make, offline_session, role, distribution=distribution, instance_count=2)


def test_pytorchxla_needs_xla_backend(offline_session, role) -> None:
    with pytest.raises(UnsupportedJobError, match="set TrainingCompilerConfig\\(backend='xla'\\)"):
        make(offline_session, role, distribution={"pytorchxla": {"enabled": True}})


def test_pytorchxla_with_xla_on_cpu(offline_session, role) -> None:
    config = TrainingCompilerConfig(backend="xla")
    with pytest.warns(CompilerConfigWarning, match="CPU instance"):
        est = make(
            offline_session,
            role,
            "ml.c5.xlarge",
            config,
            distribution={"pytorchxla": {"enabled": True}},
        )
    assert est.hyperparameters()["sagemaker_pytorch_xla_multi_worker_enabled"] == "true"


@pytest.mark.parametrize(
    ("distribution", "message"),
    [
        (
            {"smdistributed": {"dataparallel": {"enabled": True}}},
            "'smdistributed' is not supported",
        ),
        ({"mpi": {"enabled": True}}, "MPI launches are not supported"),
        (
            {"parameter_server": {"enabled": True}},
            "accepts torch_distributed, pytorchddp, pytorchxla",
        ),
    ],
)
def test_refused_distributions(offline_session, role, distribution, message) -> None:
    with pytest.raises(UnsupportedJobError, match=message):
        make(offline_session, role, distribution=distribution)


def test_heterogeneous_instance_groups_are_refused(offline_session, role) -> None:
    from sagemaker.instance_group import InstanceGroup

    groups = [InstanceGroup("a", "ml.g5.2xlarge", 1), InstanceGroup("b", "ml.p4d.24xlarge", 1)]
    with pytest.raises(UnsupportedJobError, match="heterogeneous instance_groups"):
        PyTorch(
            entry_point="train.py",
            role=role,
            instance_groups=groups,
            compiler_config=TrainingCompilerConfig(),
            sagemaker_session=offline_session,
        )


def test_xla_on_gpu_with_default_image_is_refused(offline_session, role) -> None:
    config = TrainingCompilerConfig(backend="xla", xla_engine="torch_xla")
    with pytest.raises(
        UnsupportedJobError, match=r"torch-xla 2\.9 has no CUDA.*backend='inductor'.*image_uri="
    ):
        make(offline_session, role, "ml.p4d.24xlarge", config)
    with pytest.raises(UnsupportedJobError, match="no CUDA"):
        make(None, role, "local_gpu", config)


def test_xla_on_gpu_with_own_image_warns(offline_session, role) -> None:
    config = TrainingCompilerConfig(backend="xla", xla_engine="torch_xla")
    with pytest.warns(CompilerConfigWarning, match="CUDA-enabled torch-xla"):
        make(offline_session, role, "ml.p4d.24xlarge", config, image_uri="me/xla-cuda:1")


def test_debugger_and_profiler_warn(offline_session, role) -> None:
    from sagemaker.debugger import DebuggerHookConfig, ProfilerConfig

    with pytest.warns(CompilerConfigWarning, match="Debugger is on.*debugger_hook_config=False"):
        make(offline_session, role, debugger_hook_config=DebuggerHookConfig())
    with pytest.warns(CompilerConfigWarning, match="Profiler is on.*disable_profiler=True"):
        make(offline_session, role, profiler_config=ProfilerConfig(), disable_profiler=False)


def test_debugger_and_profiler_off_by_default(offline_session, role) -> None:
    est = quietly(make, offline_session, role)
    assert est.debugger_hook_config is False
    assert est.disable_profiler is True


def test_disabled_config_skips_checks(offline_session, role) -> None:
    quietly(make, offline_session, role, "ml.trn1.32xlarge", TrainingCompilerConfig(enabled=False))


def test_validate_for_returns_warnings(offline_session, role) -> None:
    est = quietly(make, offline_session, role)
    with pytest.warns(CompilerConfigWarning):
        issued = TrainingCompilerConfig().validate_for(
            type("E", (), {"instance_type": "ml.c5.xlarge"})()
        )
    assert issued and "CPU instance" in issued[0]
    assert TrainingCompilerConfig().validate_for(est) == []
