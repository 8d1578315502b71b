"""TrainingCompilerConfig: fields, messages, and the hyperparameter codec."""

from __future__ import annotations

import json

import pytest
from hypothesis import given
from hypothesis import strategies as st

from trcomp import CompilerConfigError, TrainingCompilerConfig
from trcomp.contract.errors import HyperparameterLimitError, TrcompError
from trcomp.contract.keys import CONFIG_KEY, DEBUG_KEY, ENABLED_KEY


def test_default_config_sends_what_the_aws_sdk_sends() -> None:
    hps = TrainingCompilerConfig().to_hyperparameters()
    assert hps[ENABLED_KEY] == "true"
    assert hps[DEBUG_KEY] == "false"
    body = json.loads(hps[CONFIG_KEY])
    assert body["backend"] == "auto" and body["trcomp_version"]
    assert set(hps) == {ENABLED_KEY, DEBUG_KEY, CONFIG_KEY}


def test_hyperparameter_dict_matches_the_sdk_encoding() -> None:
    config = TrainingCompilerConfig(debug=True)
    raw = config._to_hyperparameter_dict()
    assert raw[ENABLED_KEY] is True and raw[DEBUG_KEY] is True
    assert {k: json.dumps(v) for k, v in raw.items()} == config.to_hyperparameters()


def test_config_is_frozen() -> None:
    config = TrainingCompilerConfig()
    with pytest.raises(Exception, match="frozen"):
        config.enabled = False  # type: ignore[misc]


def test_errors_are_value_errors() -> None:
    assert issubclass(CompilerConfigError, TrcompError)
    assert issubclass(TrcompError, ValueError)


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"backend": "tvm"}, r"backend: .*'auto', 'xla' or 'inductor' \(got 'tvm'\)"),
        ({"mode": "fast"}, r"mode: .*\(got 'fast'\)"),
        ({"fallback": "cpu"}, r"fallback: .*\(got 'cpu'\)"),
        ({"colour": "red"}, r"colour: unknown field; TrainingCompilerConfig takes: enabled"),
        ({"xla_flags": ["xla_foo"]}, r"'xla_foo' is not an XLA flag: write it as '--xla_name'"),
        ({"xla_flags": ["--xla_a b"]}, r"is not an XLA flag"),
        ({"inductor_options": {"Bad Key": 1}}, r"'Bad Key' is not a torch._inductor.config name"),
        ({"backend": "xla", "mode": "max-autotune"}, r"mode is only for backend='inductor'"),
        (
            {"backend": "xla", "fullgraph": True, "dynamic": False},
            r"fullgraph, dynamic are only for backend='inductor'.*set backend='inductor'",
        ),
        ({"backend": "xla", "inductor_options": {"a": 1}}, r"inductor_options is only for"),
        (
            {"backend": "inductor", "xla_flags": ["--xla_x=1"]},
            r"xla_flags only apply to backend='xla'.*drop xla_flags or set backend='xla'",
        ),
    ],
)
def test_invalid_fields_are_named(kwargs: dict, message: str) -> None:
    with pytest.raises(CompilerConfigError, match=message):
        TrainingCompilerConfig(**kwargs)


def test_valid_non_default_fields() -> None:
    config = TrainingCompilerConfig(
        backend="inductor",
        mode="max-autotune",
        fullgraph=True,
        dynamic=False,
        inductor_options={"triton.cudagraphs": False, "max_autotune_gemm_backends": "ATEN"},
    )
    assert config.mode == "max-autotune"
    xla = TrainingCompilerConfig(backend="xla", xla_flags=["--xla_dump_to=/tmp/x", "--xla_cpu_x"])
    assert xla.xla_flags[0] == "--xla_dump_to=/tmp/x"


def test_legacy_two_keys_alone() -> None:
    for raw in ({ENABLED_KEY: "true", DEBUG_KEY: "true"}, {ENABLED_KEY: True, DEBUG_KEY: True}):
        config = TrainingCompilerConfig.from_hyperparameters(raw)
        assert config == TrainingCompilerConfig(debug=True)
    assert TrainingCompilerConfig.from_hyperparameters({ENABLED_KEY: '"false"'}).enabled is False


def test_no_keys_means_off() -> None:
    assert TrainingCompilerConfig.from_hyperparameters({"epochs": "3"}).enabled is False


def test_from_hyperparameters_accepts_decoded_values() -> None:
    config = TrainingCompilerConfig(backend="inductor", mode="reduce-overhead")
    decoded = {k: json.loads(v) for k, v in config.to_hyperparameters().items()}
    assert TrainingCompilerConfig.from_hyperparameters(decoded) == config


def test_unknown_field_names_field_and_both_versions() -> None:
    body = {"trcomp_version": "9.9.9", "enabled": True, "turbo": True}
    with pytest.raises(CompilerConfigError, match=r"'turbo'.*trcomp 0\.1\.0.*trcomp 9\.9\.9"):
        TrainingCompilerConfig.from_hyperparameters({CONFIG_KEY: json.dumps(body)})


def test_contradicting_legacy_key_is_an_error() -> None:
    hps = TrainingCompilerConfig().to_hyperparameters()
    hps[ENABLED_KEY] = "false"
    with pytest.raises(CompilerConfigError, match="contradicts enabled=true"):
        TrainingCompilerConfig.from_hyperparameters(hps)


@pytest.mark.parametrize(
    ("raw", "message"),
    [
        ({ENABLED_KEY: "yes"}, "must be 'true' or 'false'"),
        ({CONFIG_KEY: "[1, 2]"}, "must be a JSON object"),
        ({CONFIG_KEY: json.dumps({"backend": "tvm"})}, r"backend: .*got 'tvm'"),
    ],
)
def test_bad_hyperparameters(raw: dict, message: str) -> None:
    with pytest.raises(CompilerConfigError, match=message):
        TrainingCompilerConfig.from_hyperparameters(raw)


def test_value_limit_is_checked() -> None:
    config = TrainingCompilerConfig(inductor_options={f"k{i:04d}": "x" * 20 for i in range(120)})
    with pytest.raises(HyperparameterLimitError, match=r"at most 2500: shorten it"):
        config.to_hyperparameters()


_flags = st.lists(
    st.from_regex(r"--xla_[a-z0-9_]{1,12}(=[a-z0-9./]{1,8})?", fullmatch=True), max_size=3
)
_options = st.dictionaries(
    st.from_regex(r"[a-z_][a-z0-9_]{0,8}(\.[a-z_][a-z0-9_]{0,8})?", fullmatch=True),
    st.one_of(
        st.booleans(),
        st.integers(-1000, 1000),
        st.floats(allow_nan=False, allow_infinity=False, width=32),
        st.text(max_size=8),
    ),
    max_size=4,
)


@st.composite
def configs(draw: st.DrawFn) -> TrainingCompilerConfig:
    backend = draw(st.sampled_from(["auto", "xla", "inductor"]))
    fields: dict = {
        "enabled": draw(st.booleans()),
        "debug": draw(st.booleans()),
        "backend": backend,
        "cache": draw(st.booleans()),
        "fallback": draw(st.sampled_from(["eager", "fail"])),
    }
    if backend != "xla":
        fields["mode"] = draw(
            st.sampled_from(
                ["default", "reduce-overhead", "max-autotune", "max-autotune-no-cudagraphs"]
            )
        )
        fields["fullgraph"] = draw(st.booleans())
        fields["dynamic"] = draw(st.sampled_from([None, True, False]))
        fields["inductor_options"] = draw(_options)
    if backend != "inductor":
        fields["xla_flags"] = draw(_flags)
    return TrainingCompilerConfig(**fields)


@given(configs())
def test_round_trip_through_stored_strings(config: TrainingCompilerConfig) -> None:
    assert TrainingCompilerConfig.from_hyperparameters(config.to_hyperparameters()) == config


@given(configs())
def test_round_trip_through_decoded_values(config: TrainingCompilerConfig) -> None:
    # What the training toolkit hands over: each stored string json-decoded once.
    decoded = {k: json.loads(v) for k, v in config.to_hyperparameters().items()}
    assert TrainingCompilerConfig.from_hyperparameters(decoded) == config
