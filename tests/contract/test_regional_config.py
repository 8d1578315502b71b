"""The ``regional`` field: codec, rules, the resolved config, and the environment it sets."""

from __future__ import annotations

import json

import pytest

from trcomp.contract.config import TrainingCompilerConfig
from trcomp.contract.errors import CompilerConfigError
from trcomp.contract.keys import CONFIG_KEY
from trcomp.contract.runtime_config import RuntimeConfig
from trcomp_container.backends import inductor

FLAG = "ACCELERATE_DYNAMO_USE_REGIONAL_COMPILATION"


def body(config: TrainingCompilerConfig) -> dict[str, object]:
    return json.loads(config.to_hyperparameters()[CONFIG_KEY])  # type: ignore[no-any-return]


def test_default_is_left_out_so_older_containers_read_the_config() -> None:
    assert "regional" not in body(TrainingCompilerConfig())
    assert body(TrainingCompilerConfig(regional=False))["regional"] is False


@pytest.mark.parametrize("regional", [None, True, False])
def test_regional_round_trips(regional: bool | None) -> None:
    config = TrainingCompilerConfig(backend="inductor", regional=regional)
    again = TrainingCompilerConfig.from_hyperparameters(config.to_hyperparameters())
    assert again.regional is regional


def test_regional_with_xla_is_an_error() -> None:
    with pytest.raises(CompilerConfigError, match="regional is only for backend='inductor'"):
        TrainingCompilerConfig(backend="xla", regional=False)


@pytest.mark.parametrize(("regional", "on"), [(None, False), (True, True), (False, False)])
def test_the_resolved_config_says_whether_to_compile_regionally(
    regional: bool | None, on: bool
) -> None:
    config = TrainingCompilerConfig(backend="inductor", regional=regional)
    resolved = RuntimeConfig.resolved(config, backend="inductor", engine="inductor")
    assert RuntimeConfig.from_env(resolved.to_env()).compiles_regionally is on
    # The kwargs of torch.compile do not change: regional is how, not what, to compile.
    assert resolved.compile_kwargs() == {"backend": "inductor"}


@pytest.mark.parametrize(("regional", "env"), [(None, None), (True, "True"), (False, None)])
def test_accelerate_is_told_only_when_regional_is_true(
    regional: bool | None, env: str | None
) -> None:
    config = TrainingCompilerConfig(backend="inductor", regional=regional)
    assert inductor.environment(config).get(FLAG) == env
