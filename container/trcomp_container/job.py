"""What the entrypoint knows about the job, read once from the training toolkit.

Every path comes from ``sagemaker_training.environment``, which honours
``SAGEMAKER_BASE_DIR``, so the same code runs under ``/opt/ml`` in a container
and under a temporary directory in process mode. Nothing is read at import.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from trcomp.contract.keys import CHECKPOINT_DIR_ENV
from trcomp_container.hyperparameters import read_stored, user_args

__all__ = ["Job", "JobPaths", "checkpoint_dir"]


@dataclass(frozen=True)
class JobPaths:
    """The directories of the /opt/ml tree that the entrypoint uses."""

    base: Path
    code: Path
    model: Path
    output: Path
    output_data: Path
    checkpoints: Path

    @classmethod
    def under(cls, base: Path) -> JobPaths:
        """The standard tree under ``base`` (``/opt/ml`` in a container)."""
        base = Path(base)
        return cls(
            base=base,
            code=base / "code",
            model=base / "model",
            output=base / "output",
            output_data=base / "output" / "data",
            checkpoints=base / "checkpoints",
        )

    @property
    def compiler(self) -> Path:
        """``output/data/compiler``: summary, debug dumps; ends up in output.tar.gz."""
        return self.output_data / "compiler"

    @property
    def cache(self) -> Path:
        """``checkpoints/trcomp-cache``: compile caches, synced with checkpoint_s3_uri."""
        return self.checkpoints / "trcomp-cache"


def checkpoint_dir(base: Path, environ: Mapping[str, str]) -> Path:
    """The job's checkpoint dir: ``TRCOMP_CHECKPOINT_DIR`` when absolute, else ``base/checkpoints``.

    The estimators set the variable from ``checkpoint_local_path``, the directory
    SageMaker syncs with ``checkpoint_s3_uri``, so the compile caches are synced too.
    """
    chosen = environ.get(CHECKPOINT_DIR_ENV, "")
    return Path(chosen) if chosen.startswith("/") else base / "checkpoints"


@dataclass(frozen=True)
class Job:
    """A read-only snapshot of the job: parameters, hosts, devices and paths."""

    paths: JobPaths
    framework_params: Mapping[str, Any]
    user_args: list[str]
    toolkit_env: Mapping[str, str]
    entry_point: str | None
    module_dir: str
    hosts: list[str]
    current_host: str
    num_gpus: int
    num_cpus: int
    environ: Mapping[str, str] = field(default_factory=dict)
    instance_type: str = ""
    network_interface: str = ""
    hyperparameter_names: tuple[str, ...] = ()
    """The user's hyperparameters' names (their values are in ``user_args``)."""

    @classmethod
    def from_toolkit(cls) -> Job:
        """Read the job the way the toolkit sees it (hyperparameters, resourceconfig, SM_*)."""
        from sagemaker_training import environment

        env = environment.Environment()
        paths = JobPaths(
            base=Path(environment.base_dir),
            code=Path(environment.code_dir),
            model=Path(env.model_dir),
            output=Path(env.output_dir),
            output_data=Path(env.output_data_dir),
            checkpoints=checkpoint_dir(Path(environment.base_dir), os.environ),
        )
        return cls(
            paths=paths,
            framework_params=dict(env.additional_framework_parameters),
            # From the stored text, not the toolkit's decoding, so v3's strings stay as sent.
            user_args=user_args(
                read_stored(Path(environment.hyperparameters_file_dir)), env.hyperparameters
            ),
            toolkit_env={key: str(value) for key, value in env.to_env_vars().items()},
            entry_point=env.user_entry_point,
            module_dir=str(env.module_dir),
            hosts=list(env.hosts),
            current_host=str(env.current_host),
            num_gpus=int(env.num_gpus),
            num_cpus=int(env.num_cpus),
            environ=dict(os.environ),
            instance_type=str(env.resource_config.get("current_instance_type") or ""),
            network_interface=str(env.network_interface_name or ""),
            hyperparameter_names=tuple(str(name) for name in env.hyperparameters),
        )
