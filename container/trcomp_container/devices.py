"""Which accelerators the entrypoint sees, without importing torch."""

from __future__ import annotations

import glob
import os
from collections.abc import Mapping
from dataclasses import dataclass

__all__ = ["Devices", "detect_devices"]


@dataclass(frozen=True)
class Devices:
    """Accelerators on this host: NVIDIA GPUs (from ``nvidia-smi``) and TPU chips."""

    gpus: int = 0
    tpus: int = 0

    @property
    def kind(self) -> str:
        """``"gpu"``, ``"tpu"`` or ``"cpu"``."""
        if self.gpus:
            return "gpu"
        if self.tpus:
            return "tpu"
        return "cpu"

    def __str__(self) -> str:
        if self.gpus:
            return f"{self.gpus} NVIDIA GPU(s)"
        if self.tpus:
            return f"{self.tpus} TPU chip(s)"
        return "CPU only"


def detect_devices(num_gpus: int, environ: Mapping[str, str] | None = None) -> Devices:
    """The devices of this host; ``num_gpus`` is the toolkit's ``nvidia-smi`` count.

    TPU chips show up as ``/dev/accel*`` (v4 and older) or ``/dev/vfio/<n>`` (v5 and
    newer) on TPU VMs; ``TPU_ACCELERATOR_TYPE`` alone marks a TPU host without them.
    """
    environ = os.environ if environ is None else environ
    chips = len(glob.glob("/dev/accel[0-9]*")) or len(glob.glob("/dev/vfio/[0-9]*"))
    if not chips and environ.get("TPU_ACCELERATOR_TYPE"):
        chips = 1
    return Devices(gpus=max(0, int(num_gpus)), tpus=chips)
