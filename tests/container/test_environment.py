"""build_environment: the one place a resolved config becomes environment variables."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from trcomp.config import TrainingCompilerConfig
from trcomp_container.devices import Devices
from trcomp_container.environment import HOOK_DIR, build_environment
from trcomp_container.job import JobPaths

PATHS = JobPaths.under(Path("/opt/ml"))
CPU = Devices()


def env_for(config: TrainingCompilerConfig, backend, devices=CPU, base=None, **kwargs):
    return build_environment(
        config=config,
        backend=backend,
        devices=devices,
        paths=PATHS,
        base_env=base or {"PATH": "/usr/bin"},
        metrics_dir=Path("/m"),
        scratch_dir=Path("/scratch"),
        **kwargs,
    )


def test_disabled_sets_use_torch_xla_0_and_no_compiler_variables():
    env = env_for(TrainingCompilerConfig(enabled=False), None)
    assert env["USE_TORCH_XLA"] == "0"
    assert json.loads(env["TRCOMP_CONFIG"])["enabled"] is False
    assert env["TRCOMP_BACKEND"] == "eager"
    compiler_keys = [
        k for k in env if k.startswith(("ACCELERATE_", "TORCHINDUCTOR", "XLA_", "PJRT"))
    ]
    assert compiler_keys == []


def test_inductor_turns_on_accelerate_dynamo_and_caches_under_checkpoints():
    config = TrainingCompilerConfig(backend="inductor", mode="max-autotune", fullgraph=True)
    env = env_for(config, "inductor")
    assert env["USE_TORCH_XLA"] == "0"
    assert env["ACCELERATE_DYNAMO_BACKEND"] == "INDUCTOR"
    assert env["ACCELERATE_DYNAMO_MODE"] == "max-autotune"
    assert env["ACCELERATE_DYNAMO_USE_FULLGRAPH"] == "True"
    assert "ACCELERATE_DYNAMO_USE_DYNAMIC" not in env  # only what the user changed
    assert env["TORCHINDUCTOR_CACHE_DIR"] == "/opt/ml/checkpoints/trcomp-cache/inductor"
    assert env["TRITON_CACHE_DIR"] == "/opt/ml/checkpoints/trcomp-cache/triton"
    resolved = json.loads(env["TRCOMP_CONFIG"])
    assert resolved["backend"] == "inductor" and resolved["enabled"] is True


def test_auto_backend_is_recorded_as_requested_and_resolved():
    env = env_for(TrainingCompilerConfig(), "inductor")
    resolved = json.loads(env["TRCOMP_CONFIG"])
    assert (resolved["requested_backend"], resolved["backend"]) == ("auto", "inductor")


def test_cache_off_uses_the_scratch_directory():
    env = env_for(TrainingCompilerConfig(backend="inductor", cache=False), "inductor")
    assert env["TORCHINDUCTOR_CACHE_DIR"] == "/scratch/inductor"


def test_xla_sets_pjrt_device_and_merges_xla_flags():
    config = TrainingCompilerConfig(backend="xla", xla_flags=["--xla_cpu_fast_math=false"])
    base = {"XLA_FLAGS": "--xla_cpu_fast_math=true --xla_foo"}
    env = env_for(config, "xla", base=base)
    assert env["USE_TORCH_XLA"] == "1"
    assert env["PJRT_DEVICE"] == "CPU"
    assert env["XLA_FLAGS"] == "--xla_cpu_fast_math=false --xla_foo"
    assert env["XLA_PERSISTENT_CACHE_PATH"] == "/opt/ml/checkpoints/trcomp-cache/xla"
    assert env_for(config, "xla", devices=Devices(gpus=4))["PJRT_DEVICE"] == "CUDA"
    assert env_for(config, "xla", devices=Devices(gpus=4))["GPU_NUM_DEVICES"] == "4"
    assert env_for(config, "xla", devices=Devices(tpus=4))["PJRT_DEVICE"] == "TPU"


@pytest.mark.parametrize("backend", ["inductor", "xla"])
def test_debug_points_dumps_at_the_compiler_directory(backend):
    env = env_for(TrainingCompilerConfig(backend=backend, debug=True), backend)
    assert env["TRCOMP_COMPILER_DIR"] == "/opt/ml/output/data/compiler"
    if backend == "inductor":
        assert env["TORCH_COMPILE_DEBUG_DIR"].startswith("/opt/ml/output/data/compiler/")
        assert "recompiles" in env["TORCH_LOGS"] and "graph_breaks" in env["TORCH_LOGS"]
    else:
        assert "--xla_dump_to=/opt/ml/output/data/compiler/xla_dump" in env["XLA_FLAGS"]
        assert env["XLA_SAVE_TENSORS_FILE"].startswith("/opt/ml/output/data/compiler/")


def test_user_settings_win_for_locations_but_not_for_decisions():
    base = {"TORCHINDUCTOR_CACHE_DIR": "/mine", "USE_TORCH_XLA": "1", "PYTHONPATH": "/lib"}
    env = env_for(TrainingCompilerConfig(backend="inductor"), "inductor", base=base)
    assert env["TORCHINDUCTOR_CACHE_DIR"] == "/mine"
    assert env["USE_TORCH_XLA"] == "0"
    assert env["PYTHONPATH"].split(":") == [str(HOOK_DIR), "/opt/ml/code", "/lib"]


def test_fallback_reason_travels_in_trcomp_config():
    env = env_for(TrainingCompilerConfig(backend="xla"), None, fallback_reason="no torch_xla")
    resolved = json.loads(env["TRCOMP_CONFIG"])
    assert resolved == {**resolved, "enabled": False, "backend": None}
    assert resolved["fallback_reason"] == "no torch_xla"
    assert env["USE_TORCH_XLA"] == "0"


def test_the_hook_directory_ships_sitecustomize():
    assert (HOOK_DIR / "sitecustomize.py").is_file()
