"""The hyperparameters that tell the container how to launch a distributed job.

Same keys as SageMaker v2's framework estimators, so the container reads jobs
from either SDK the same way.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from trcomp.validation import enabled_distributions

__all__ = ["DISTRIBUTION_KEYS", "INSTANCE_TYPE_KEY", "distribution_hyperparameters"]

DISTRIBUTION_KEYS = {
    "torch_distributed": "sagemaker_torch_distributed_enabled",
    "pytorchddp": "sagemaker_pytorch_ddp_enabled",
    "pytorchxla": "sagemaker_pytorch_xla_multi_worker_enabled",
}
INSTANCE_TYPE_KEY = "sagemaker_instance_type"


def distribution_hyperparameters(
    distribution: Mapping[str, Any] | None, instance_type: str | None = None
) -> dict[str, str]:
    """Encoded hyperparameters for the enabled, supported distribution strategies."""
    encoded = {
        DISTRIBUTION_KEYS[name]: json.dumps(True)
        for name in enabled_distributions(distribution)
        if name in DISTRIBUTION_KEYS
    }
    if encoded and instance_type:
        encoded[INSTANCE_TYPE_KEY] = json.dumps(instance_type)
    return encoded
