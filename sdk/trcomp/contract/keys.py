"""Names that cross the SDK/container boundary: hyperparameter keys and environment variables.

A key is written on one side and read on the other; both sides import it from
here, so a rename cannot leave one side behind.
"""

from __future__ import annotations

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

# -- environment variables ---------------------------------------------------

CONFIG_ENV = "TRCOMP_CONFIG"
"""The resolved config, container -> user's process (:mod:`trcomp.contract.runtime_config`)."""
INDUCTOR_OPTIONS_ENV = "TRCOMP_INDUCTOR_OPTIONS"
"""The config's ``inductor_options`` as JSON; the start-up hook applies them (once, globally)."""
CHECKPOINT_DIR_ENV = "TRCOMP_CHECKPOINT_DIR"
"""The job's checkpoint directory inside the container (``checkpoint_local_path``)."""
CHECKPOINT_URI_ENV = "TRCOMP_CHECKPOINT_URI"
"""The user's checkpoint location (a local job's ``file://`` URI).

The container reports the compile cache there in summary.json, not at its own
mount point, which means nothing once the job is over.
"""
CACHE_DIR_ENV = "TRCOMP_CACHE_DIR"
"""The compile cache the job's processes write to (persisted with the checkpoints at the end).

The start-up hook keeps its eager-against-compiled decision there (``trcomp/speedup.json``).
"""
