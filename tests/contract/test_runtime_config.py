"""RuntimeConfig: the resolved config in TRCOMP_CONFIG, from the container to the script."""

from __future__ import annotations

import json

import pydantic
import pytest

from trcomp._version import __version__
from trcomp.contract.config import TrainingCompilerConfig
from trcomp.contract.keys import CONFIG_ENV
from trcomp.contract.runtime_config import RuntimeConfig

CONFIG = TrainingCompilerConfig(
    backend="inductor",
    mode="reduce-overhead",
    fullgraph=True,
    dynamic=False,
    debug=True,
    inductor_options={"epilogue_fusion": False},
)


def test_round_trip_through_the_environment() -> None:
    resolved = RuntimeConfig.resolved(CONFIG, backend="inductor", engine="inductor")
    env = resolved.to_env()
    assert list(env) == [CONFIG_ENV]
    assert RuntimeConfig.from_env(env) == resolved
    assert resolved.trcomp_version == __version__
    assert (resolved.enabled, resolved.requested_backend) == (True, "inductor")


def test_the_variable_keeps_the_documented_keys() -> None:
    # docs/environment.md: every config field plus these.
    extra = {"requested_backend", "engine", "fallback_reason", "trcomp_version", "device_kind"}
    resolved = RuntimeConfig.resolved(CONFIG, backend="inductor", engine="inductor")
    body = json.loads(resolved.to_env()[CONFIG_ENV])
    assert set(body) == set(TrainingCompilerConfig.model_fields) | extra
    assert body["inductor_options"] == {"epilogue_fusion": False}
    assert body["mode"] == "reduce-overhead" and body["dynamic"] is False


def test_a_fallback_is_eager_and_says_why() -> None:
    auto = TrainingCompilerConfig()
    resolved = RuntimeConfig.resolved(auto, backend=None, engine=None, fallback_reason="no gcc")
    back = RuntimeConfig.from_env(resolved.to_env())
    assert (back.enabled, back.backend, back.engine) == (False, None, None)
    assert (back.requested_backend, back.fallback_reason) == ("auto", "no gcc")


@pytest.mark.parametrize("text", [None, "", "[1, 2]", '"inductor"'])
def test_unset_or_not_an_object_means_the_compiler_is_off(text: str | None) -> None:
    env = {} if text is None else {CONFIG_ENV: text}
    config = RuntimeConfig.from_env(env)
    assert config == RuntimeConfig() and not config.enabled and config.backend is None


def test_a_partial_body_takes_the_defaults_and_unknown_keys_are_ignored() -> None:
    body = {"enabled": True, "backend": "xla", "engine": "jax", "from_a_newer_trcomp": 1}
    config = RuntimeConfig.from_env({CONFIG_ENV: json.dumps(body)})
    assert (config.backend, config.engine, config.mode) == ("xla", "jax", "default")


@pytest.mark.parametrize(
    ("text", "message"),
    [("{oops", "not valid JSON"), ('{"backend": "tvm"}', "not a config trcomp")],
)
def test_a_broken_variable_says_what_to_do(text: str, message: str) -> None:
    with pytest.raises(ValueError, match=f"TRCOMP_CONFIG is {message}.*unset it to run eager"):
        RuntimeConfig.from_env({CONFIG_ENV: text})


def test_it_is_frozen() -> None:
    with pytest.raises(pydantic.ValidationError):
        RuntimeConfig().enabled = True  # type: ignore[misc]
