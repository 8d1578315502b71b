"""Which accelerators the entrypoint sees, without importing torch.

The GPU count is what CUDA will let the training processes use: the GPUs that
``nvidia-smi --list-gpus`` lists, filtered by ``CUDA_VISIBLE_DEVICES`` the way
the CUDA runtime reads it (indices, ``GPU-`` and ``MIG-`` UUIDs or their
prefixes; the list ends at the first entry that names no device). A GPU split
into MIG instances counts as its instances; CUDA gives one process one MIG
instance only, so on MIG instances the job runs one process on one of them.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Literal

from trcomp.contract.instances import tpu_chips

__all__ = [
    "Devices",
    "GpuListing",
    "detect_devices",
    "list_gpus",
    "parse_gpu_listing",
    "visible_gpus",
]

_GPU_LINE = re.compile(r"^GPU (\d+):.*\(UUID: (GPU-[0-9a-fA-F-]+)\)")
_MIG_LINE = re.compile(r"^\s+MIG .*\(UUID: (MIG-[^)\s]+)\)")
_NVIDIA_SMI_TIMEOUT_S = 30


@dataclass(frozen=True)
class GpuListing:
    """One physical GPU from ``nvidia-smi --list-gpus``: index, UUID and MIG instance UUIDs."""

    index: int
    uuid: str = ""
    mig: tuple[str, ...] = ()


@dataclass(frozen=True)
class Devices:
    """Accelerators this job can use: visible NVIDIA GPUs and TPU chips.

    ``gpus`` counts the devices CUDA will show the training processes (1 on
    MIG instances: a process can use one); ``host_gpus`` the physical GPUs of
    the host (None: unknown); ``mig`` is True when the visible devices are MIG
    instances; ``notes`` say why fewer devices are used than the host has.
    """

    gpus: int = 0
    tpus: int = 0
    host_gpus: int | None = None
    mig: bool = False
    notes: tuple[str, ...] = field(default=(), compare=False)

    @property
    def kind(self) -> Literal["gpu", "tpu", "cpu"]:
        """``"gpu"``, ``"tpu"`` or ``"cpu"``."""
        if self.gpus:
            return "gpu"
        if self.tpus:
            return "tpu"
        return "cpu"

    def __str__(self) -> str:
        if self.gpus:
            what = "MIG instance" if self.mig else "NVIDIA GPU(s)"
            shown = f"{self.gpus} {what}"
            if self.host_gpus is not None and self.host_gpus != self.gpus:
                shown += f" (of {self.host_gpus} on the host)"
            return shown
        if self.tpus:
            return f"{self.tpus} TPU chip(s)"
        return "CPU only"


def parse_gpu_listing(text: str) -> list[GpuListing]:
    """The GPUs (and their MIG instances) in ``nvidia-smi --list-gpus`` output."""
    gpus: list[GpuListing] = []
    for line in text.splitlines():
        gpu = _GPU_LINE.match(line)
        if gpu:
            gpus.append(GpuListing(int(gpu.group(1)), gpu.group(2)))
            continue
        if line.startswith("GPU "):  # an older nvidia-smi without UUIDs
            number = re.match(r"GPU (\d+)", line)
            gpus.append(GpuListing(int(number.group(1)) if number else len(gpus)))
            continue
        mig = _MIG_LINE.match(line)
        if mig and gpus:
            last = gpus[-1]
            gpus[-1] = GpuListing(last.index, last.uuid, (*last.mig, mig.group(1)))
    return gpus


def _names(token: str, gpus: list[GpuListing]) -> list[str]:
    """The devices one CUDA_VISIBLE_DEVICES entry selects ([]: it names none)."""
    if token.isdigit():
        index = int(token)
        chosen = next((gpu for gpu in gpus if gpu.index == index), None)
        if chosen is None:
            return []
        return list(chosen.mig) or [chosen.uuid or f"gpu{index}"]
    if token.startswith("MIG-"):
        # MIG-<uuid> or the older MIG-GPU-<uuid>/<gi>/<ci> form.
        for gpu in gpus:
            for mig in gpu.mig:
                if mig.startswith(token) or (gpu.uuid and token.startswith(f"MIG-{gpu.uuid}/")):
                    return [token]
        return []
    if token.startswith("GPU-"):
        matches = [gpu for gpu in gpus if gpu.uuid.startswith(token)]
        return (list(matches[0].mig) or [matches[0].uuid]) if len(matches) == 1 else []
    return []


def visible_gpus(gpus: list[GpuListing], cuda_visible_devices: str | None) -> tuple[int, bool]:
    """``(devices CUDA shows a process, whether they are MIG instances)``.

    ``cuda_visible_devices`` None means unset: every GPU (a MIG-enabled GPU as
    its instances). CUDA stops reading the list at the first entry that names
    no device, and a device named twice makes the list invalid.
    """
    if cuda_visible_devices is None:
        names = [name for gpu in gpus for name in (list(gpu.mig) or [gpu.uuid or str(gpu.index)])]
    else:
        names = []
        for raw in cuda_visible_devices.split(","):
            found = _names(raw.strip(), gpus)
            if not found:
                break
            if any(name in names for name in found):
                return 0, False
            names += found
    mig = any(name.startswith("MIG-") for name in names)
    return len(names), mig


def list_gpus(nvidia_smi: str | None = None) -> str | None:
    """``nvidia-smi --list-gpus`` output, or None when nvidia-smi is missing or fails."""
    binary = nvidia_smi or shutil.which("nvidia-smi")
    if binary is None:
        return None
    try:
        done = subprocess.run(
            [binary, "--list-gpus"],
            capture_output=True,
            text=True,
            timeout=_NVIDIA_SMI_TIMEOUT_S,
            check=False,
        )
    except (OSError, subprocess.TimeoutExpired):
        return None
    return done.stdout if done.returncode == 0 else None


def detect_devices(
    num_gpus: int, environ: Mapping[str, str] | None = None, listing: str | None = None
) -> Devices:
    """The devices this job can use; ``num_gpus`` is the toolkit's ``nvidia-smi`` count.

    ``listing`` is ``nvidia-smi --list-gpus`` output (read here when None and
    the toolkit counted GPUs). TPU chips show up as ``/dev/accel*`` (v4 and
    older) or ``/dev/vfio/<n>`` (v5 and newer) on TPU VMs;
    ``TPU_ACCELERATOR_TYPE`` alone marks a TPU host without them.
    """
    environ = os.environ if environ is None else environ
    chips = tpu_chips(environ)
    host = max(0, int(num_gpus))
    if listing is None and host:
        listing = list_gpus()
    gpus = parse_gpu_listing(listing) if listing else []
    if not gpus:
        gpus = [GpuListing(index) for index in range(host)]
    selector = environ.get("CUDA_VISIBLE_DEVICES")
    count, mig = visible_gpus(gpus, selector)
    notes: list[str] = []
    if selector is not None and count < len(gpus):
        notes.append(f"CUDA_VISIBLE_DEVICES={selector!r} leaves {count} of the {len(gpus)} GPUs")
    if mig and count > 1:
        notes.append(
            f"{count} devices are visible, MIG instances among them, but CUDA gives one "
            "process one MIG "
            "instance: the job runs one process on the first; set CUDA_VISIBLE_DEVICES "
            "to one MIG UUID per job to use the others"
        )
        count = 1
    return Devices(gpus=count, tpus=chips, host_gpus=len(gpus), mig=mig, notes=tuple(notes))
