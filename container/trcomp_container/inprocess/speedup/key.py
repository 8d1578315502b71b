"""The one decision key: everything that changes whether compiling pays.

A stored decision is reused only by a job whose key is the same: the model's
structure, the first call's input shapes and dtypes, autocast, the config
(less the fallback reason), torch and trcomp versions, the device model and
count, the world size and the script with its arguments.
"""

from __future__ import annotations

import hashlib
import json
import os
import platform
import sys
from typing import Any

__all__ = ["autocast_state", "decision_key", "device_identity", "fingerprint", "module_signature"]


def fingerprint(parts: dict[str, Any]) -> str:
    """A stable hash of what makes a measurement valid (model, config, versions, device)."""
    text = json.dumps(parts, sort_keys=True, default=str)
    return hashlib.sha256(text.encode()).hexdigest()[:20]


def module_signature(module: Any) -> str:
    """A short description of a module's structure: class name and parameter shapes."""

    def shape(param: Any) -> str:
        # An uninitialized (lazy) parameter has no shape yet.
        if type(param).__name__.startswith("Uninitialized"):
            return "lazy"
        return str(tuple(param.shape))

    shapes = ",".join(
        f"{name}:{shape(param)}:{str(param.dtype).removeprefix('torch.')}"
        for name, param in module.named_parameters()
    )
    return f"{type(module).__qualname__}[{shapes}]"


def autocast_state(torch: Any) -> list[Any]:
    """``[device, enabled, dtype]`` for CPU and CUDA autocast (the ahead-of-time key too)."""
    state = []
    for device in ("cpu", "cuda"):
        try:
            on = bool(torch.is_autocast_enabled(device))
            state.append([device, on, str(torch.get_autocast_dtype(device)) if on else None])
        except (RuntimeError, TypeError):  # a torch without the device argument
            state.append([device, None, None])
    return state


def device_identity(torch: Any) -> list[Any]:
    """The accelerator model and count, or the CPU's: a decision is only valid on them."""
    try:
        if torch.cuda.is_available():
            return ["cuda", torch.cuda.get_device_name(), torch.cuda.device_count()]
    except RuntimeError:
        return ["unknown"]
    model = platform.processor()
    try:
        with open("/proc/cpuinfo") as info:
            model = next(
                (line.split(":", 1)[1].strip() for line in info if line.startswith("model name")),
                model,
            )
    except OSError:
        pass
    return ["cpu", model, os.cpu_count()]


def decision_key(torch: Any, *, signature: str, args: Any, config: Any, world_size: str) -> str:
    """The key of a decision for the model of ``signature`` called with ``args``."""
    fields = config.model_dump(mode="json")
    fields.pop("fallback_reason", None)
    inputs = [
        [list(arg.shape), str(arg.dtype)] if isinstance(arg, torch.Tensor) else type(arg).__name__
        for arg in args
    ]
    return fingerprint(
        {
            "model": signature,
            "inputs": inputs,
            "autocast": autocast_state(torch),
            "config": fields,
            "versions": [torch.__version__, config.trcomp_version],
            "device": device_identity(torch),
            "world_size": world_size,
            "script": list(sys.argv),
        }
    )
