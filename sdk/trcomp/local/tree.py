"""Lay out a SageMaker ``/opt/ml`` tree under any directory.

Process mode and the container tests run the real training toolkit against this
tree with ``SAGEMAKER_BASE_DIR`` pointing at it, so it must look exactly like
the one SageMaker mounts: ``input/config/*.json``, ``input/data/<channel>/``,
``code/``, ``model/``, ``output/data/`` and ``checkpoints/``.
"""

from __future__ import annotations

import json
import shutil
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

__all__ = ["lay_out_tree"]

_GROUP = "homogeneousCluster"


def lay_out_tree(
    base: Path,
    *,
    hyperparameters: Mapping[str, Any],
    channels: Mapping[str, Path] | None = None,
    source_dir: Path | None = None,
    entry_point: str | None = None,
    hosts: Sequence[str] = ("localhost",),
    current_host: str = "localhost",
    instance_type: str = "local",
    job_name: str = "trcomp-job",
    encoded: bool = False,
) -> Path:
    """Write a training job's ``/opt/ml`` tree under ``base`` and return ``base``.

    ``hyperparameters`` are Python values; each is JSON-encoded as the SageMaker
    SDK's framework estimators do (``encoded=True``: they already are, e.g. the
    output of ``estimator.hyperparameters()``, and are written verbatim).
    ``channels`` maps a channel name to a file or directory copied into
    ``input/data/<channel>/``. ``source_dir`` is copied into ``code/``; with no
    ``source_dir``, ``entry_point`` may be the path of a single script to copy.
    ``hosts`` must resolve on this machine: the toolkit waits up to 15 minutes
    for every host in ``resourceconfig.json`` to resolve before it starts.
    """
    if current_host not in hosts:
        raise ValueError(f"current_host {current_host!r} is not one of hosts {list(hosts)}")
    base = Path(base).resolve()
    config_dir = base / "input" / "config"
    for directory in (
        config_dir,
        base / "input" / "data",
        base / "model",
        base / "output" / "data",
        base / "checkpoints",
        base / "code",
    ):
        directory.mkdir(parents=True, exist_ok=True)

    values = {key: _encode(value, encoded) for key, value in hyperparameters.items()}
    defaults = {
        "sagemaker_job_name": json.dumps(job_name),
        "sagemaker_container_log_level": "20",
    }
    program = _copy_code(base / "code", source_dir, entry_point)
    if program is not None:
        defaults["sagemaker_program"] = json.dumps(program)
        defaults["sagemaker_submit_directory"] = json.dumps(str(base / "code"))
    hyperparameter_file = {**defaults, **values}

    channel_config: dict[str, dict[str, str]] = {}
    for name, source in (channels or {}).items():
        _copy_into(Path(source), base / "input" / "data" / name)
        channel_config[name] = {
            "TrainingInputMode": "File",
            "S3DistributionType": "FullyReplicated",
            "RecordWrapperType": "None",
        }

    resource_config = {
        "current_host": current_host,
        "current_instance_type": instance_type,
        "current_group_name": _GROUP,
        "hosts": list(hosts),
        "instance_groups": [
            {
                "instance_group_name": _GROUP,
                "instance_type": instance_type,
                "hosts": list(hosts),
            }
        ],
        "network_interface_name": "eth0",
    }
    _write_json(config_dir / "hyperparameters.json", hyperparameter_file)
    _write_json(config_dir / "resourceconfig.json", resource_config)
    _write_json(config_dir / "inputdataconfig.json", channel_config)
    return base


def _encode(value: Any, encoded: bool) -> str:
    if not encoded:
        return json.dumps(value)
    if not isinstance(value, str):
        raise TypeError(
            f"encoded=True expects every hyperparameter value to be a JSON string, got "
            f"{type(value).__name__} {value!r}: pass encoded=False to encode Python values"
        )
    return value


def _copy_code(code_dir: Path, source_dir: Path | None, entry_point: str | None) -> str | None:
    if source_dir is not None:
        shutil.copytree(source_dir, code_dir, dirs_exist_ok=True)
        if entry_point is None:
            return None
        if not (code_dir / entry_point).is_file():
            raise FileNotFoundError(f"entry_point {entry_point!r} is not a file in {source_dir}")
        return entry_point
    if entry_point is None:
        return None
    script = Path(entry_point)
    if script.is_file():
        shutil.copy2(script, code_dir / script.name)
        return script.name
    # A name with no file behind it is still written: the job fails at start, as on SageMaker.
    return entry_point


def _copy_into(source: Path, destination: Path) -> None:
    destination.mkdir(parents=True, exist_ok=True)
    if source.is_dir():
        shutil.copytree(source, destination, dirs_exist_ok=True)
    else:
        shutil.copy2(source, destination / source.name)


def _write_json(path: Path, body: object) -> None:
    path.write_text(json.dumps(body, indent=2, sort_keys=True) + "\n")
