"""How many NVIDIA GPUs a SageMaker instance type has, and the warning when a job uses one.

A job without a distribution runs one process, which trains on one GPU; on a
multi-GPU instance that wastes the others (and HF Trainer falls back to
``nn.DataParallel``, which is slower than one process per GPU). The SDK warns
in the estimator's constructor and the container says the same in the job's
summary, both with :func:`single_process_warning`.

Pure: no sagemaker, no torch; the container imports it too.
"""

from __future__ import annotations

import os
import sys
import warnings
from pathlib import Path

__all__ = [
    "EFA_RDMA_FAMILIES",
    "gpu_count",
    "single_process_warning",
    "warn_at_caller",
]

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

_TRCOMP_DIR = str(Path(__file__).resolve().parent)


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


def _library_dirs() -> tuple[str, ...]:
    # The SageMaker SDK (v3's sagemaker is a namespace package: no __file__, several
    # paths) and pydantic, which calls v3 ModelTrainer's checks from its __init__.
    dirs = [_TRCOMP_DIR]
    for name in ("sagemaker", "pydantic"):
        module = sys.modules.get(name)
        if module is not None:
            dirs.extend(str(Path(path).resolve()) for path in getattr(module, "__path__", []))
    return tuple(directory + os.sep for directory in dirs)


def warn_at_caller(message: str, category: type[Warning]) -> None:
    """``warnings.warn`` pointing at the first frame outside trcomp and the SageMaker SDK.

    The user's line (``PyTorch(...)`` in their script) is what the warning must
    show, however deep in trcomp it is raised.
    """
    libraries = _library_dirs()
    level = 2  # 1 is this line; 2 is our caller
    frame = sys._getframe(1)
    while frame.f_back is not None:
        if not os.path.realpath(frame.f_code.co_filename).startswith(libraries):
            break
        frame = frame.f_back
        level += 1
    warnings.warn(message, category, stacklevel=level)
