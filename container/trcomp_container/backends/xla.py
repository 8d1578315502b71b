"""Environment for torch-xla (PJRT): device, flags, persistent cache and debug dumps."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path

from trcomp.contract.config import TrainingCompilerConfig
from trcomp_container.devices import Devices

__all__ = [
    "cache_environment",
    "debug_environment",
    "environment",
    "merge_xla_flags",
    "pjrt_device",
]


def pjrt_device(devices: Devices) -> str:
    """The PJRT device torch-xla must use on this host."""
    return {"gpu": "CUDA", "tpu": "TPU", "cpu": "CPU"}[devices.kind]


def environment(
    config: TrainingCompilerConfig, devices: Devices, environ: Mapping[str, str]
) -> dict[str, str]:
    """Variables that point torch-xla at this host's devices, with the config's flags."""
    env = {
        "USE_TORCH_XLA": "1",
        "PJRT_DEVICE": pjrt_device(devices),
    }
    if devices.gpus:
        env["GPU_NUM_DEVICES"] = str(devices.gpus)
    flags = merge_xla_flags(environ.get("XLA_FLAGS", ""), config.xla_flags)
    if flags:
        env["XLA_FLAGS"] = flags
    return env


def merge_xla_flags(existing: str, extra: list[str]) -> str:
    """``XLA_FLAGS`` with ``extra`` appended; a flag given again replaces the earlier value."""
    merged: dict[str, str] = {}
    for flag in [*existing.split(), *extra]:
        merged[flag.split("=", 1)[0]] = flag
    return " ".join(merged.values())


def cache_environment(cache_dir: Path) -> dict[str, str]:
    """torch-xla's persistent compilation cache under ``cache_dir``."""
    return {
        "XLA_PERSISTENT_CACHE_PATH": str(cache_dir / "xla"),
        "XLA_PERSISTENT_CACHE_READ_ONLY": "0",
    }


def debug_environment(compiler_dir: Path, xla_flags: str) -> dict[str, str]:
    """IR and HLO dumps, the per-step metrics report and PT_XLA_DEBUG analysis."""
    return {
        "XLA_IR_DEBUG": "1",
        "XLA_HLO_DEBUG": "1",
        "XLA_SAVE_TENSORS_FILE": str(compiler_dir / "xla_graphs.txt"),
        "XLA_SAVE_TENSORS_FMT": "hlo",
        "XLA_METRICS_FILE": str(compiler_dir / "xla_metrics.txt"),
        "PT_XLA_DEBUG_LEVEL": "2",
        "PT_XLA_DEBUG_FILE": str(compiler_dir / "pt_xla_debug.txt"),
        "XLA_FLAGS": merge_xla_flags(xla_flags, [f"--xla_dump_to={compiler_dir / 'xla_dump'}"]),
    }
