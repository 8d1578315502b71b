"""Old-product torch-xla scripts on GPU hosts: stop them before they train on the CPU.

Scripts written for SageMaker Training Compiler's plain-PyTorch recipe ask
torch-xla for its device (``xm.xla_device()``). torch-xla 2.9 has no CUDA
build, so on an NVIDIA GPU host that device is the CPU: the job would train
there while the GPUs sit idle. When the job's engine is not torch-xla and the
host has GPUs, the device calls stop the script with the replacements to make.
Importing torch-xla stays allowed (accelerate and transformers import it).
"""

from __future__ import annotations

import importlib
from collections.abc import Callable
from types import ModuleType
from typing import Any

__all__ = ["REPLACEMENTS", "install", "refusal"]

REPLACEMENTS = (
    ("xm.xla_device()", "trcomp.runtime.device()"),
    ("xm.optimizer_step(optimizer)", "trcomp.runtime.optimizer_step(optimizer)"),
    ("xm.mark_step()", "trcomp.runtime.mark_step()"),
    ("pl.MpDeviceLoader(loader, device)", "trcomp.runtime.wrap_loader(loader)"),
)


def refusal(engine: str | None) -> str:
    """The reason the script was stopped, with the exact replacements."""
    runs = f"the job's compiler is {engine}" if engine else "the compiler is off"
    swaps = "; ".join(f"{old} -> {new}" for old, new in REPLACEMENTS)
    return (
        "this script asks torch-xla for its device on a host with NVIDIA GPUs, but "
        "torch-xla 2.9 has no CUDA build: it would train on the CPU while the GPUs sit "
        f"idle ({runs}). trcomp stopped it before training. Replace {swaps} "
        "(`from trcomp import runtime`; docs/migration.md shows both scripts), and the "
        "job compiles on the GPUs with the same compiler_config."
    )


def install(torch_xla: ModuleType, stop: Callable[[], None]) -> Callable[[], None]:
    """Make torch-xla's device functions call ``stop()`` (which must raise); returns the undo."""
    xm: Any = importlib.import_module("torch_xla.core.xla_model")
    before = (xm.xla_device, getattr(torch_xla, "device", None))

    def refused(*args: Any, **kwargs: Any) -> Any:
        stop()
        raise AssertionError("stop() must raise")  # pragma: no cover

    xm.xla_device = refused
    torch_xla.device = refused  # type: ignore[attr-defined]

    def undo() -> None:
        xm.xla_device = before[0]
        torch_xla.device = before[1]  # type: ignore[attr-defined]

    return undo
