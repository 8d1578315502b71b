"""What trcomp knows about SageMaker instance types: one table, easy to extend.

Pure data and pure functions: the SDK checks jobs with it, the container reads
GPU counts and EFA families from it.
"""

from __future__ import annotations

import glob
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Literal

__all__ = [
    "DOCKER_LOCAL_MODES",
    "EFA_RDMA_FAMILIES",
    "FAMILIES",
    "GPUS",
    "MIN_COMPUTE_CAPABILITY",
    "PROCESS_MODE",
    "Gpu",
    "InstanceInfo",
    "InstanceKind",
    "describe_instance",
    "gpu_count",
    "single_process_warning",
    "supported_gpu_families",
    "tpu_chips",
]

PROCESS_MODE = "local_process"
"""The instance type of process mode: the job runs on this machine, no Docker."""
DOCKER_LOCAL_MODES = ("local", "local_gpu")
"""The instance types of SageMaker's own local mode (Docker)."""

InstanceKind = Literal["gpu", "cpu", "neuron", "unusable_gpu", "local", "local_gpu", "unknown"]
LOCAL_TYPES: dict[str, InstanceKind] = {
    "local": "local",
    "local_gpu": "local_gpu",
    # process mode runs on this machine, like Docker local mode on CPU
    PROCESS_MODE: "local",
}

# family -> kind. NVIDIA GPU families pass; CPU families pass with a warning;
# Neuron (Trainium, Inferentia) have their own compiler and are refused, and so
# are the GPU families torch 2.9's CUDA build and triton cannot use (GPUS says why).
# A family missing here is "unknown": a warning, never an error, so a new GPU
# family works on the day it launches.
FAMILIES: dict[str, InstanceKind] = {
    **dict.fromkeys(
        ["p3", "p3dn", "g4dn", "g5", "g6", "g6e", "p4d", "p4de", "p5", "p5e", "p5en"], "gpu"
    ),
    **dict.fromkeys(
        [
            "c4",
            "c5",
            "c5n",
            "c6i",
            "c6in",
            "c7i",
            "m4",
            "m5",
            "m5d",
            "m6i",
            "m7i",
            "r5",
            "r5d",
            "r6i",
            "t2",
            "t3",
        ],
        "cpu",
    ),
    **dict.fromkeys(["trn1", "trn1n", "trn2", "inf1", "inf2"], "neuron"),
    **dict.fromkeys(["p2", "g3", "g3s", "g4ad"], "unusable_gpu"),
}

MIN_COMPUTE_CAPABILITY = (7, 0)
"""Oldest NVIDIA compute capability trcomp's image can compile for: torch 2.9.0+cu128 is
built for sm_70 to sm_120, and inductor's triton refuses anything older than 7.0."""


@dataclass(frozen=True)
class Gpu:
    """The GPU of an instance family: vendor, model and (NVIDIA) compute capability."""

    vendor: Literal["nvidia", "amd"]
    model: str
    compute_capability: tuple[int, int] | None = None

    @property
    def usable(self) -> bool:
        """True when torch 2.9's CUDA build and inductor's triton can run on it."""
        cc = self.compute_capability
        return self.vendor == "nvidia" and cc is not None and cc >= MIN_COMPUTE_CAPABILITY


GPUS: dict[str, Gpu] = {
    "p2": Gpu("nvidia", "K80", (3, 7)),
    "g3": Gpu("nvidia", "M60", (5, 2)),
    "g3s": Gpu("nvidia", "M60", (5, 2)),
    "g4ad": Gpu("amd", "Radeon Pro V520"),
    "p3": Gpu("nvidia", "V100", (7, 0)),
    "p3dn": Gpu("nvidia", "V100", (7, 0)),
    "g4dn": Gpu("nvidia", "T4", (7, 5)),
    "g5": Gpu("nvidia", "A10G", (8, 6)),
    "g6": Gpu("nvidia", "L4", (8, 9)),
    "g6e": Gpu("nvidia", "L40S", (8, 9)),
    "p4d": Gpu("nvidia", "A100", (8, 0)),
    "p4de": Gpu("nvidia", "A100", (8, 0)),
    "p5": Gpu("nvidia", "H100", (9, 0)),
    "p5e": Gpu("nvidia", "H200", (9, 0)),
    "p5en": Gpu("nvidia", "H200", (9, 0)),
}
"""What GPU each GPU family has; every family here is in FAMILIES."""


def supported_gpu_families() -> list[str]:
    """The GPU families jobs run on without a warning, as in FAMILIES."""
    return [family for family, kind in FAMILIES.items() if kind == "gpu"]


@dataclass(frozen=True)
class InstanceInfo:
    """An instance type split into its family and what kind of machine that is."""

    instance_type: str
    family: str
    kind: InstanceKind

    @property
    def has_nvidia_gpu(self) -> bool:
        """True for NVIDIA GPU families and ``local_gpu``."""
        return self.kind in ("gpu", "local_gpu")

    @property
    def gpu(self) -> Gpu | None:
        """The family's GPU, when GPUS knows it."""
        return GPUS.get(self.family)


def describe_instance(instance_type: str) -> InstanceInfo:
    """Classify ``ml.g5.2xlarge``, ``local``, ``local_gpu``, ``local_process`` and the like."""
    if instance_type in LOCAL_TYPES:
        return InstanceInfo(instance_type, instance_type, LOCAL_TYPES[instance_type])
    parts = instance_type.split(".")
    family = parts[1] if len(parts) == 3 and parts[0] == "ml" else instance_type
    return InstanceInfo(instance_type, family, FAMILIES.get(family, "unknown"))


# family -> {size: GPUs}; "*" is every other size of that family.
_GPUS: dict[str, dict[str, int]] = {
    "p3": {"2xlarge": 1, "8xlarge": 4, "16xlarge": 8},
    "p3dn": {"24xlarge": 8},
    "g4dn": {"12xlarge": 4, "metal": 8, "*": 1},
    "g5": {"12xlarge": 4, "24xlarge": 4, "48xlarge": 8, "*": 1},
    "g6": {"12xlarge": 4, "24xlarge": 4, "48xlarge": 8, "*": 1},
    "g6e": {"12xlarge": 4, "24xlarge": 4, "48xlarge": 8, "*": 1},
    "p4d": {"24xlarge": 8},
    "p4de": {"24xlarge": 8},
    "p5": {"4xlarge": 1, "48xlarge": 8},
    "p5e": {"48xlarge": 8},
    "p5en": {"48xlarge": 8},
}

EFA_RDMA_FAMILIES = frozenset({"p4d", "p4de", "p5", "p5e", "p5en"})
"""Families whose EFA adapters do RDMA (``FI_EFA_USE_DEVICE_RDMA=1``)."""


def gpu_count(instance_type: object) -> int | None:
    """NVIDIA GPUs of ``ml.<family>.<size>``; None when unknown (local modes, CPU, new types).

    A SageMaker Pipelines variable (not a str) is unknown until the pipeline runs.
    """
    if not isinstance(instance_type, str) or not instance_type:
        return None
    parts = instance_type.split(".")
    if len(parts) != 3 or parts[0] != "ml":
        return None
    sizes = _GPUS.get(parts[1])
    if sizes is None:
        return None
    return sizes.get(parts[2], sizes.get("*"))


def single_process_warning(instance_type: str | None, gpus: int) -> str:
    """The warning for one training process on a host with ``gpus`` GPUs (``gpus`` > 1)."""
    where = f"{instance_type} has" if instance_type else "this host has"
    return (
        f"{where} {gpus} GPUs but the job has no distribution, so it starts one process "
        f"that trains on 1 of {gpus} GPUs (HF Trainer would fall back to the slower "
        "nn.DataParallel). To use all of them, pass "
        "distribution={'torch_distributed': {'enabled': True}}: one process per GPU "
        "under torchrun."
    )


def tpu_chips(environ: Mapping[str, str]) -> int:
    """How many TPU chips this host has: ``/dev/accel*`` (TPU v4 and older) or
    ``/dev/vfio/<n>`` (v5 and newer) on TPU VMs; ``TPU_ACCELERATOR_TYPE`` alone
    marks a TPU host without them (one chip is assumed)."""
    chips = len(glob.glob("/dev/accel[0-9]*")) or len(glob.glob("/dev/vfio/[0-9]*"))
    if not chips and environ.get("TPU_ACCELERATOR_TYPE"):
        chips = 1
    return chips
