"""The hyperparameter codec under hostile input: every malformed value is a CompilerConfigError."""

from __future__ import annotations

from typing import Any

import pytest

from trcomp.config import TrainingCompilerConfig
from trcomp.contract.errors import CompilerConfigError
from trcomp.contract.keys import CONFIG_KEY, DEBUG_KEY, ENABLED_KEY

HUGE = 5_000_000


@pytest.mark.parametrize(
    ("mapping", "named"),
    [
        (None, "hyperparameters"),
        ([ENABLED_KEY], "hyperparameters"),
        ("sagemaker_training_compiler_enabled=true", "hyperparameters"),
        # Under SageMaker's 2,500-character value limit, deeper than json's recursion limit.
        ({CONFIG_KEY: "[" * 1200 + "]" * 1200}, CONFIG_KEY),
        ({CONFIG_KEY: '"' + "[" * 1200 + "]" * 1200 + '"'}, CONFIG_KEY),
        ({CONFIG_KEY: None}, CONFIG_KEY),
        ({CONFIG_KEY: b"{}"}, CONFIG_KEY),
        ({CONFIG_KEY: {1: 2, "a": 3}}, CONFIG_KEY),  # keys of mixed types
        ({ENABLED_KEY: None}, ENABLED_KEY),
        ({DEBUG_KEY: {"a": [1]}}, DEBUG_KEY),
        ({CONFIG_KEY: {"xla_flags": None}}, "xla_flags"),
        ({CONFIG_KEY: {"xla_flags": "--xla_a"}}, "xla_flags"),
        ({CONFIG_KEY: {"inductor_options": {"a": {"b": [1]}}}}, "inductor_options"),
        ({CONFIG_KEY: {"inductor_options": None}}, "inductor_options"),
        ({CONFIG_KEY: {"dynamic": "NaN"}}, "dynamic"),
        ({CONFIG_KEY: '{"mode": NaN}'}, "mode"),
    ],
)
def test_malformed_input_names_the_field(mapping: Any, named: str) -> None:
    with pytest.raises(CompilerConfigError, match=named):
        TrainingCompilerConfig.from_hyperparameters(mapping)


@pytest.mark.parametrize(
    "body",
    [
        {"backend": "xla", "xla_flags": ["--xla_cpu_fast_math\n"]},
        {"backend": "inductor", "inductor_options": {"max_autotune\n": True}},
    ],
)
def test_patterns_match_whole_strings(body: dict[str, Any]) -> None:
    with pytest.raises(CompilerConfigError, match=r"xla_flags|inductor_options"):
        TrainingCompilerConfig.from_hyperparameters({CONFIG_KEY: body})
    with pytest.raises(CompilerConfigError):
        TrainingCompilerConfig(**body)


@pytest.mark.parametrize(
    "mapping",
    [
        {CONFIG_KEY: {"backend": "x" * HUGE}},
        {CONFIG_KEY: {"y" * HUGE: 1}},
        {ENABLED_KEY: "z" * HUGE},
        {CONFIG_KEY: {"backend": "xla", "xla_flags": ["--xla " * HUGE]}},
        {ENABLED_KEY: "true", CONFIG_KEY: {"enabled": "q" * HUGE}},
    ],
)
def test_echoed_values_are_cut_to_a_readable_length(mapping: dict[str, Any]) -> None:
    with pytest.raises(CompilerConfigError) as caught:
        TrainingCompilerConfig.from_hyperparameters(mapping)
    assert len(str(caught.value)) < 1000
