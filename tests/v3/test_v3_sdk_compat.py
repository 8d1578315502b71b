"""trcomp.v3._sdk_compat against the installed SageMaker SDK v3: each private use still holds.

A failure here means v3 changed underneath trcomp/v3/_sdk_compat.py: the request
hook would no longer be called (the job would run v3's driver instead of trcomp's
entrypoint, with the compiler off), or would be called with other arguments.
"""

from __future__ import annotations

import inspect
import re
from pathlib import Path

import pytest

pytest.importorskip(
    "sagemaker.train.model_trainer", reason="needs the SageMaker SDK v3: run make test-v3"
)

from sagemaker.train.model_trainer import ModelTrainer as V3ModelTrainer

from trcomp.v3 import ModelTrainer, _sdk_compat

ROOT = Path(__file__).resolve().parents[2]
HOOK = "_create_training_job_args"


def test_v3_train_builds_its_request_with_the_hook() -> None:
    train = inspect.unwrap(V3ModelTrainer.train)  # under v3's telemetry and pydantic wrappers
    assert train is not V3ModelTrainer.train
    assert HOOK in train.__code__.co_names
    # ...and sends what it returns: the request is the value train() reads the job from.
    assert "training_request" in train.__code__.co_varnames


def test_the_hook_takes_what_v3_passes() -> None:
    ours = inspect.signature(_sdk_compat.TrainingRequestHook._create_training_job_args)
    theirs = inspect.signature(getattr(V3ModelTrainer, HOOK))
    shape = [(p.name, p.kind, p.default) for p in theirs.parameters.values()]
    assert shape == [(p.name, p.kind, p.default) for p in ours.parameters.values()]
    assert list(theirs.parameters) == ["self", "input_data_config", "boto3"]


def test_trcomps_trainer_runs_the_hook_before_v3s_builder() -> None:
    assert _sdk_compat.SDK_HOOKS == (HOOK,)
    mro = ModelTrainer.__mro__
    assert mro.index(_sdk_compat.TrainingRequestHook) < mro.index(V3ModelTrainer)
    assert getattr(ModelTrainer, HOOK) is _sdk_compat.TrainingRequestHook._create_training_job_args


def test_no_other_v3_module_names_the_hook() -> None:
    found = [
        f"{path.relative_to(ROOT)}:{number}"
        for path in (ROOT / "sdk/trcomp").rglob("*.py")
        if path.name != "_sdk_compat.py"
        for number, line in enumerate(path.read_text().splitlines(), 1)
        if re.search(rf"\b{HOOK}\b", line)
    ]
    assert not found, found
