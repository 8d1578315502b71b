"""What a SageMaker SDK v3 job becomes so that trcomp's image entrypoint runs it.

Pure functions over plain values: :class:`trcomp.v3.ModelTrainer` reads its
fields, calls these, and hands the result to v3's own request builder. With
``source_code`` set, v3 replaces the image's entrypoint with its own driver
(``sm_train.sh``), so trcomp's toolkit entrypoint, and with it the compiler,
would never run. Instead the code travels as the ``code`` channel and the job
names it the way SageMaker v2's framework estimators do (``sagemaker_program``,
``sagemaker_submit_directory``), which the training toolkit reads.
"""

from __future__ import annotations

import json
import os
import tempfile
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

from trcomp.checkpoints import checkpoint_environment
from trcomp.contract.distribution import distribution_hyperparameters
from trcomp.contract.env import NPROC_PER_NODE_ENV
from trcomp.contract.errors import UnsupportedJobError
from trcomp.contract.instances import DOCKER_LOCAL_MODES
from trcomp.contract.limits import check_limits
from trcomp.jobspec import JobSpec

if TYPE_CHECKING:
    from trcomp.config import TrainingCompilerConfig

__all__ = [
    "CACHE_CHANNEL",
    "CODE_CHANNEL",
    "CODE_MOUNT",
    "PROGRAM_KEY",
    "SUBMIT_DIRECTORY_KEY",
    "check_source_code",
    "distribution_for",
    "encode_like_v3",
    "entrypoint_hyperparameters",
    "job_spec",
    "local_cache_environment",
    "telemetry_opt_out_file",
]

CODE_CHANNEL = "code"
"""The channel the user's ``source_dir`` travels in (v3 uses the same name for it)."""
CODE_MOUNT = f"/opt/ml/input/data/{CODE_CHANNEL}"
CACHE_CHANNEL = "trcomp_checkpoints"
"""Local container mode: the channel that mounts the local checkpoint (and cache) dir."""
PROGRAM_KEY = "sagemaker_program"
SUBMIT_DIRECTORY_KEY = "sagemaker_submit_directory"
USER_CONFIG_ENV = "SAGEMAKER_USER_CONFIG_OVERRIDE"
"""The variable v3 reads its user config file from (telemetry opt-out goes there)."""
_TORCHRUN_NPROC_ENV = NPROC_PER_NODE_ENV


def check_source_code(
    *,
    source_dir: str | None,
    entry_script: str | None,
    command: str | None,
    requirements: str | None,
    args: list[Any] | None,
) -> None:
    """Refuse, before the job, what trcomp's entrypoint cannot run from a ``SourceCode``."""
    where = "trcomp.v3.ModelTrainer"
    if command:
        raise UnsupportedJobError(
            f"SourceCode.command={command!r} is not supported by {where}: the image's "
            "entrypoint launches one script (under torchrun with Torchrun()) with the compiler "
            "on, not a shell command. Set SourceCode(entry_script=...) and pass options as "
            "hyperparameters."
        )
    if args:
        raise UnsupportedJobError(
            f"SourceCode.args is not supported by {where}: the entrypoint passes "
            "hyperparameters to the script as --name value. Move the arguments into "
            "hyperparameters={...}."
        )
    if not entry_script:
        raise UnsupportedJobError(
            f"{where} needs SourceCode(source_dir=..., entry_script=...): the image's "
            "entrypoint runs that script with the compiler on."
        )
    if not source_dir:
        raise UnsupportedJobError(
            f"{where} needs SourceCode.source_dir: the directory that holds "
            f"{entry_script!r}; it travels to the job as the {CODE_CHANNEL!r} channel."
        )
    if source_dir.endswith((".tar.gz", ".tgz")):
        raise UnsupportedJobError(
            f"SourceCode.source_dir={source_dir!r} is an archive; {where} sends the code as a "
            "channel and takes a local directory or an S3 prefix: extract it and pass the "
            "directory."
        )
    if not source_dir.startswith("s3://") and not (Path(source_dir) / entry_script).is_file():
        raise UnsupportedJobError(
            f"entry_script {entry_script!r} is not a file in source_dir {source_dir!r}: set "
            "entry_script to a path inside source_dir."
        )
    if requirements and Path(requirements).as_posix() != "requirements.txt":
        raise UnsupportedJobError(
            f"SourceCode.requirements={requirements!r}: trcomp's entrypoint (the SageMaker "
            "training toolkit) installs only a requirements.txt at the top of source_dir. "
            "Rename the file to requirements.txt there, or drop requirements=."
        )


def distribution_for(kind: str | None, *, smp: bool = False) -> dict[str, Any]:
    """The v2 ``distribution=`` dict for v3's ``distributed`` (``Torchrun``, ``MPI``, None)."""
    if kind is None:
        return {}
    if kind == "Torchrun":
        if smp:
            raise UnsupportedJobError(
                "Torchrun(smp=...) (SageMaker model parallelism) is not supported with "
                "trcomp: its patches stop the compiler from tracing the model. Drop smp=."
            )
        return {"torch_distributed": {"enabled": True}}
    if kind == "MPI":
        return {"mpi": {"enabled": True}}
    raise UnsupportedJobError(
        f"distributed={kind}(...) is not supported by trcomp.v3.ModelTrainer; it launches "
        "Torchrun() or one process. Use distributed=Torchrun()."
    )


def local_instance_type(instance_type: str | None) -> str | None:
    """v3 names local instances ``local_cpu``/``local_gpu``; the checks know ``local``."""
    if instance_type is None or instance_type in DOCKER_LOCAL_MODES:
        return instance_type
    return "local"


def job_spec(
    *,
    instance_types: tuple[str, ...],
    distribution: Mapping[str, Any],
    training_image: str | None,
    image_is_default: bool,
    instance_count: int = 1,
    compiler_config: TrainingCompilerConfig | None = None,
    environment: Mapping[str, Any] | None = None,
    framework_version: str | None = None,
) -> JobSpec:
    """The job as the shared compiler checks see it (v3 has no Debugger or Profiler).

    ``environment`` is the trainer's ``environment=``: the shared-cache checks look
    there for the signing key and the Redis password (as Secrets Manager references).
    ``framework_version`` is the trainer's torch version as given (None: the default).
    """
    return JobSpec(
        compiler_config=compiler_config,
        instance_types=instance_types,
        instance_count=instance_count,
        distribution=dict(distribution),
        framework_version=framework_version,
        image_uri=None if image_is_default else training_image,
        image_is_default=image_is_default,
        environment=dict(environment or {}),
    )


def entrypoint_hyperparameters(
    *,
    entry_script: str,
    submit_directory: str,
    distribution: Mapping[str, Any],
    instance_type: str | None,
) -> dict[str, str]:
    """The ``sagemaker_*`` hyperparameters that make the toolkit entrypoint run the script."""
    return {
        PROGRAM_KEY: entry_script,
        SUBMIT_DIRECTORY_KEY: submit_directory,
        **distribution_hyperparameters(distribution, instance_type),
    }


def encode_like_v3(hyperparameters: Mapping[str, Any]) -> dict[str, str]:
    """What v3 stores: a str unchanged, anything else JSON (checked against SageMaker's limits)."""
    encoded = {
        str(key): value if isinstance(value, str) else json.dumps(value)
        for key, value in hyperparameters.items()
    }
    check_limits(encoded)
    return encoded


def launch_environment(process_count_per_node: int | None) -> dict[str, str]:
    """Torchrun's ``process_count_per_node`` for the entrypoint (default: one per GPU)."""
    if process_count_per_node is None:
        return {}
    return {_TORCHRUN_NPROC_ENV: str(int(process_count_per_node))}


def local_cache_environment(host_dir: Path) -> dict[str, str]:
    """Local container mode: checkpoints (and compile caches) go to the mounted ``host_dir``.

    The summary names the cache by its place on this machine, as in v2's local modes.
    """
    return checkpoint_environment(f"/opt/ml/input/data/{CACHE_CHANNEL}", host_dir.resolve())


def telemetry_opt_out_file(existing: str | None) -> Path:
    """A v3 user config file that opts out of telemetry, keeping the user's other settings.

    ``existing`` is the current ``SAGEMAKER_USER_CONFIG_OVERRIDE`` (a YAML file), if any.
    The caller removes the returned file when the job is done.
    """
    import yaml

    config: dict[str, Any] = {}
    if existing and Path(existing).is_file():
        loaded = yaml.safe_load(Path(existing).read_text())
        config = dict(loaded) if isinstance(loaded, dict) else {}
    config.setdefault("SchemaVersion", "1.0")
    modules = (
        config.setdefault("SageMaker", {}).setdefault("PythonSDK", {}).setdefault("Modules", {})
    )
    modules["TelemetryOptOut"] = True
    handle, name = tempfile.mkstemp(prefix="trcomp-sagemaker-config-", suffix=".yaml")
    with os.fdopen(handle, "w") as out:
        yaml.safe_dump(config, out)
    return Path(name)
