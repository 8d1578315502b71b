"""Names that cross the SDK/container boundary: hyperparameter keys (and, re-exported, the
environment variables of :mod:`trcomp.contract.env`, the registry of every one).

A key is written on one side and read on the other; both sides import it from
here, so a rename cannot leave one side behind.
"""

from __future__ import annotations

from trcomp.contract.env import (
    CACHE_DIR_ENV,
    CHECKPOINT_DIR_ENV,
    CHECKPOINT_URI_ENV,
    CONFIG_ENV,
    INDUCTOR_OPTIONS_ENV,
)

__all__ = [
    "CACHE_DIR_ENV",
    "CHECKPOINT_DIR_ENV",
    "CHECKPOINT_URI_ENV",
    "CONFIG_ENV",
    "CONFIG_KEY",
    "DEBUG_KEY",
    "DISTRIBUTION_KEYS",
    "ENABLED_KEY",
    "INDUCTOR_OPTIONS_ENV",
    "INSTANCE_TYPE_KEY",
    "UNSUPPORTED_DISTRIBUTION_KEYS",
    "VERSION_FIELD",
]

# -- compiler hyperparameters (the AWS SDK's two, and trcomp's third) ----------

ENABLED_KEY = "sagemaker_training_compiler_enabled"
DEBUG_KEY = "sagemaker_training_compiler_debug_mode"
CONFIG_KEY = "sagemaker_training_compiler_config"
VERSION_FIELD = "trcomp_version"
"""Field of the config body naming the trcomp that wrote it, so a container can
name the SDK version behind a config it does not understand."""

# -- distribution hyperparameters (the keys of SageMaker v2's framework estimators) ----

DISTRIBUTION_KEYS = {
    "torch_distributed": "sagemaker_torch_distributed_enabled",
    "pytorchddp": "sagemaker_pytorch_ddp_enabled",
    "pytorchxla": "sagemaker_pytorch_xla_multi_worker_enabled",
}
"""Distribution name -> the hyperparameter that turns it on."""
INSTANCE_TYPE_KEY = "sagemaker_instance_type"
UNSUPPORTED_DISTRIBUTION_KEYS = {
    "sagemaker_mpi_enabled": "mpi",
    "sagemaker_distributed_dataparallel_enabled": "smdistributed dataparallel",
    "sagemaker_distributed_modelparallel_enabled": "smdistributed modelparallel",
}
"""Hyperparameters of distributions the container refuses -> their names in messages."""
