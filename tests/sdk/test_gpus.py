"""GPUs per instance type, and the warning when a job would use one of several."""

from __future__ import annotations

import warnings

import pytest

from trcomp import CompilerConfigWarning, PyTorch, TrainingCompilerConfig
from trcomp.contract.instances import gpu_count


@pytest.mark.parametrize(
    ("instance_type", "gpus"),
    [
        ("ml.p4d.24xlarge", 8),
        ("ml.p5.48xlarge", 8),
        ("ml.p5.4xlarge", 1),
        ("ml.g5.2xlarge", 1),
        ("ml.g5.12xlarge", 4),
        ("ml.g5.48xlarge", 8),
        ("ml.g6e.24xlarge", 4),
        ("ml.p3.16xlarge", 8),
        ("ml.c5.xlarge", None),
        ("local_gpu", None),
        ("ml.p9.48xlarge", None),
        (None, None),
    ],
)
def test_gpu_count(instance_type: str | None, gpus: int | None) -> None:
    assert gpu_count(instance_type) == gpus


def test_p4d_without_distribution_warns_at_the_users_line(offline_session, role) -> None:
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        PyTorch(  # the line the warning must point at
            entry_point="train.py",
            role=role,
            instance_type="ml.p4d.24xlarge",
            instance_count=1,
            distribution=None,
            compiler_config=TrainingCompilerConfig(),
            sagemaker_session=offline_session,
        )
    (warning,) = [w for w in caught if issubclass(w.category, CompilerConfigWarning)]
    assert "1 of 8 GPUs" in str(warning.message)
    assert "distribution={'torch_distributed': {'enabled': True}}" in str(warning.message)
    assert warning.filename == __file__


def test_no_warning_with_a_distribution_or_one_gpu(offline_session, role) -> None:
    with warnings.catch_warnings():
        warnings.simplefilter("error", CompilerConfigWarning)
        for instance_type, distribution in (
            ("ml.p4d.24xlarge", {"torch_distributed": {"enabled": True}}),
            ("ml.g5.2xlarge", None),
        ):
            PyTorch(
                entry_point="train.py",
                role=role,
                instance_type=instance_type,
                instance_count=1,
                distribution=distribution,
                sagemaker_session=offline_session,
            )


def test_validation_warnings_point_at_the_users_line(offline_session, role) -> None:
    with pytest.warns(CompilerConfigWarning, match="CPU instance") as caught:
        PyTorch(
            entry_point="train.py",
            role=role,
            instance_type="ml.c5.4xlarge",
            instance_count=1,
            compiler_config=TrainingCompilerConfig(),
            sagemaker_session=offline_session,
        )
    assert {w.filename for w in caught} == {__file__}
