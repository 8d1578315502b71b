"""Environment for the jax engine of ``backend="xla"`` (torchax on JAX).

JAX reads its settings from ``JAX_*`` variables at import, so the whole engine
is configured here, before the user's process starts:

- ``JAX_PLATFORMS`` pins the platform: ``cuda`` on GPU hosts, so a broken CUDA
  plugin is an error at start instead of a silent run on CPU;
- the persistent compilation cache lives under the job's cache dir, with the
  minimum compile time 0 and the minimum entry size -1, since JAX otherwise
  stores nothing for programs that compile in under a second;
- ``XLA_PYTHON_CLIENT_PREALLOCATE=false``: JAX would take 75% of each GPU at
  start while torch holds memory of its own in the same process; JAX then
  allocates what it needs as it needs it.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path

from trcomp.contract.config import TrainingCompilerConfig
from trcomp.contract.env import XLA_ENGINE_ENV
from trcomp_container.backends.xla import merge_xla_flags
from trcomp_container.devices import Devices

__all__ = ["cache_environment", "debug_environment", "environment", "jax_platform"]


def jax_platform(devices: Devices) -> str:
    """The one JAX platform the job may use on this host."""
    return {"gpu": "cuda", "tpu": "tpu", "cpu": "cpu"}[devices.kind]


def environment(
    config: TrainingCompilerConfig, devices: Devices, environ: Mapping[str, str]
) -> dict[str, str]:
    """Variables that select the jax engine and point JAX at this host's devices."""
    env = {
        # transformers must not move models to torch-xla's device on this engine.
        "USE_TORCH_XLA": "0",
        XLA_ENGINE_ENV: "jax",
        "JAX_PLATFORMS": jax_platform(devices),
        "XLA_PYTHON_CLIENT_PREALLOCATE": "false",
    }
    flags = merge_xla_flags(environ.get("XLA_FLAGS", ""), config.xla_flags)
    if flags:
        env["XLA_FLAGS"] = flags
    return env


def cache_environment(cache_dir: Path) -> dict[str, str]:
    """JAX's persistent compilation cache under ``cache_dir``, keeping every program.

    The path is resolved: JAX puts a directory under it into the compile options,
    which are part of every cache key, so the same cache reached through another
    path (process mode links each job's checkpoints dir to the user's) would miss.
    """
    return {
        "JAX_COMPILATION_CACHE_DIR": os.path.realpath(cache_dir / "jax"),
        "JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS": "0",
        "JAX_PERSISTENT_CACHE_MIN_ENTRY_SIZE_BYTES": "-1",
    }


def debug_environment(compiler_dir: Path, xla_flags: str) -> dict[str, str]:
    """HLO text dumps of every program under ``compiler_dir/xla_dump`` and compile logs."""
    dump = [f"--xla_dump_to={compiler_dir / 'xla_dump'}", "--xla_dump_hlo_as_text"]
    return {
        "JAX_LOG_COMPILES": "1",
        "XLA_FLAGS": merge_xla_flags(xla_flags, dump),
    }
