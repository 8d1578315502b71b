"""What trcomp knows about SageMaker instance types: one table, easy to extend."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

__all__ = [
    "DOCKER_LOCAL_MODES",
    "FAMILIES",
    "PROCESS_MODE",
    "InstanceInfo",
    "InstanceKind",
    "describe_instance",
]

PROCESS_MODE = "local_process"
"""The instance type of process mode: the job runs on this machine, no Docker."""
DOCKER_LOCAL_MODES = ("local", "local_gpu")
"""The instance types of SageMaker's own local mode (Docker)."""

InstanceKind = Literal["gpu", "cpu", "neuron", "local", "local_gpu", "unknown"]
LOCAL_TYPES: dict[str, InstanceKind] = {
    "local": "local",
    "local_gpu": "local_gpu",
    # process mode runs on this machine, like Docker local mode on CPU
    PROCESS_MODE: "local",
}

# family -> kind. NVIDIA GPU families pass; CPU families pass with a warning;
# Neuron (Trainium, Inferentia) have their own compiler and are refused.
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
}


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


def describe_instance(instance_type: str) -> InstanceInfo:
    """Classify ``ml.g5.2xlarge``, ``local``, ``local_gpu``, ``local_process`` and the like."""
    if instance_type in LOCAL_TYPES:
        return InstanceInfo(instance_type, instance_type, LOCAL_TYPES[instance_type])
    parts = instance_type.split(".")
    family = parts[1] if len(parts) == 3 and parts[0] == "ml" else instance_type
    return InstanceInfo(instance_type, family, FAMILIES.get(family, "unknown"))
