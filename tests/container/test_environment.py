"""build_environment: the one place a resolved config becomes environment variables."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from tests.helpers import forkserver
from trcomp.config import TrainingCompilerConfig
from trcomp_container.backends import resolve_engine
from trcomp_container.devices import Devices
from trcomp_container.environment import HOOK_DIR, build_environment
from trcomp_container.job import JobPaths

PATHS = JobPaths.under(Path("/opt/ml"))
CPU = Devices()


def env_for(config: TrainingCompilerConfig, backend, devices=CPU, base=None, **kwargs):
    return build_environment(
        config=config,
        backend=backend,
        engine=resolve_engine(config, backend, devices),
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
    config = TrainingCompilerConfig(
        backend="xla", xla_engine="torch_xla", xla_flags=["--xla_cpu_fast_math=false"]
    )
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


def test_jax_engine_sets_platform_cache_allocator_and_engine():
    config = TrainingCompilerConfig(backend="xla", xla_engine="jax", xla_flags=["--xla_cpu_x"])
    env = env_for(config, "xla")
    assert env["TRCOMP_XLA_ENGINE"] == "jax"
    assert env["JAX_PLATFORMS"] == "cpu"
    assert env["XLA_PYTHON_CLIENT_PREALLOCATE"] == "false"
    assert env["JAX_COMPILATION_CACHE_DIR"] == "/opt/ml/checkpoints/trcomp-cache/jax"
    assert env["JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS"] == "0"
    assert env["JAX_PERSISTENT_CACHE_MIN_ENTRY_SIZE_BYTES"] == "-1"
    assert env["XLA_FLAGS"] == "--xla_cpu_x"
    assert env["USE_TORCH_XLA"] == "0"
    assert "PJRT_DEVICE" not in env and "XLA_PERSISTENT_CACHE_PATH" not in env
    resolved = json.loads(env["TRCOMP_CONFIG"])
    assert (resolved["backend"], resolved["engine"]) == ("xla", "jax")


def test_auto_engine_is_jax_on_gpus_and_torch_xla_on_cpu():
    on_gpu = env_for(TrainingCompilerConfig(backend="xla"), "xla", devices=Devices(gpus=8))
    assert on_gpu["JAX_PLATFORMS"] == "cuda"  # never a silent CPU run
    assert json.loads(on_gpu["TRCOMP_CONFIG"])["engine"] == "jax"
    on_cpu = env_for(TrainingCompilerConfig(backend="xla"), "xla")
    assert on_cpu["PJRT_DEVICE"] == "CPU" and "JAX_PLATFORMS" not in on_cpu
    assert json.loads(on_cpu["TRCOMP_CONFIG"])["engine"] == "torch_xla"


def test_jax_engine_debug_dumps_hlo_into_the_compiler_dir():
    config = TrainingCompilerConfig(backend="xla", xla_engine="jax", debug=True)
    env = env_for(config, "xla")
    assert "--xla_dump_to=/opt/ml/output/data/compiler/xla_dump" in env["XLA_FLAGS"]
    assert "--xla_dump_hlo_as_text" in env["XLA_FLAGS"]
    assert env["JAX_LOG_COMPILES"] == "1"
    assert env["TRCOMP_COMPILER_DIR"] == "/opt/ml/output/data/compiler"


def test_jax_cache_goes_to_scratch_when_cache_is_off():
    config = TrainingCompilerConfig(backend="xla", xla_engine="jax", cache=False)
    assert env_for(config, "xla")["JAX_COMPILATION_CACHE_DIR"] == "/scratch/jax"


@pytest.mark.slow
def test_no_job_environment_makes_torch_xla_guess_its_device(tmp_path):
    # With torch-xla installed, `import accelerate` (and transformers) imports it unless
    # USE_TORCH_XLA is false, and torch-xla then logs "Defaulting to PJRT_DEVICE=CPU"
    # when PJRT_DEVICE is unset. Every engine's environment must settle one or the other.
    base = {k: v for k, v in os.environ.items() if not k.startswith(("TRCOMP_", "SM_"))}
    for name in ("USE_TORCH_XLA", "PJRT_DEVICE"):
        base.pop(name, None)
    # Forked as the jobs' scripts are (torch imported, not torch-xla: tests/helpers/forkserver.py).
    guessed = forkserver.run_python(
        ["-c", "import accelerate"], base, capture_output=True, text=True
    )
    assert "Defaulting to PJRT_DEVICE" in guessed.stderr  # what a bare environment prints
    cases = [
        (TrainingCompilerConfig(enabled=False), None),
        (TrainingCompilerConfig(backend="inductor"), "inductor"),
        (TrainingCompilerConfig(backend="xla"), "xla"),
        (TrainingCompilerConfig(backend="xla", xla_engine="jax"), "xla"),
    ]
    for config, backend in cases:
        env = env_for(config, backend, base={**base, "TRCOMP_METRICS_DIR": str(tmp_path)})
        done = forkserver.run_python(
            ["-c", "import accelerate"], env, capture_output=True, text=True
        )
        assert done.returncode == 0, done.stderr[-2000:]
        assert "PJRT_DEVICE" not in done.stderr, (config, done.stderr[-2000:])
