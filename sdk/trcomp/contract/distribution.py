"""Which distribution a job runs: the rule both sides apply.

The SDK turns an estimator's ``distribution=`` into hyperparameters
(:func:`distribution_hyperparameters`, the keys of SageMaker v2's framework
estimators, so the container reads jobs from either SDK the same way); the
container reads them back (:func:`launched_distribution`). Pure: no SDK, no torch.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any, Literal

from trcomp.contract.errors import UnsupportedJobError
from trcomp.contract.keys import (
    DISTRIBUTION_KEYS,
    INSTANCE_TYPE_KEY,
    UNSUPPORTED_DISTRIBUTION_KEYS,
)

__all__ = [
    "ACCEPTED_DISTRIBUTIONS",
    "PROCESS_PER_DEVICE",
    "REFUSED_DISTRIBUTIONS",
    "Launched",
    "distribution_hyperparameters",
    "enabled_distributions",
    "launched_distribution",
]

Launched = Literal["none", "torch_distributed", "pytorchxla"]
"""How the container launches the script: alone, or under torchrun (torch or XLA workers)."""

ACCEPTED_DISTRIBUTIONS = ("torch_distributed", "pytorchddp", "pytorchxla")
PROCESS_PER_DEVICE = ACCEPTED_DISTRIBUTIONS
"""Distributions that start one process per device (which the jax engine cannot use)."""
REFUSED_DISTRIBUTIONS = {
    "smdistributed": "SageMaker's data/model parallel libraries patch the model in ways the "
    "compiler cannot trace; use distribution={'torch_distributed': {'enabled': True}}",
    "mpi": "MPI launches are not supported with the compiler; use "
    "distribution={'torch_distributed': {'enabled': True}}",
}


def enabled_distributions(distribution: Mapping[str, Any] | None) -> list[str]:
    """The distribution strategies an estimator turns on (``{"enabled": False}`` is off)."""
    names = []
    for name, options in (distribution or {}).items():
        if isinstance(options, Mapping) and options.get("enabled") is False:
            continue
        names.append(name)
    return names


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


def _enabled(value: Any) -> bool:
    return value is True or str(value).lower() == "true"


def launched_distribution(framework_params: Mapping[str, Any]) -> Launched:
    """How a job's ``sagemaker_*`` parameters ask the container to launch the script.

    Raises :class:`UnsupportedJobError` for a distribution the container cannot run.
    """
    for key, name in UNSUPPORTED_DISTRIBUTION_KEYS.items():
        if _enabled(framework_params.get(key)):
            raise UnsupportedJobError(
                f"distribution {name!r} ({key}) is not supported by the trcomp container: "
                "use distribution={'torch_distributed': {'enabled': True}} (torchrun) or "
                "{'pytorchxla': {'enabled': True}}"
            )
    if _enabled(framework_params.get(DISTRIBUTION_KEYS["pytorchxla"])):
        return "pytorchxla"
    torchrun = (DISTRIBUTION_KEYS["torch_distributed"], DISTRIBUTION_KEYS["pytorchddp"])
    if any(_enabled(framework_params.get(key)) for key in torchrun):
        return "torch_distributed"
    return "none"
