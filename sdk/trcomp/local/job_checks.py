"""Checks a local job passes before anything is created, and its own artifact folder.

Process mode and Docker local mode call :func:`check_local_job` first thing in
``fit()``: a refusal leaves nothing behind (no temp dir, no container). Then
:func:`claim_job_dir` creates ``<output_path>/<job name>/``, atomically, so two
jobs, one after the other or at the same time, never write into one folder:
SageMaker itself writes ``<output_path>/<job name>/output/model.tar.gz``.
"""

from __future__ import annotations

import os
import re
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from trcomp.contract.errors import LocalModeError
from trcomp.jobspec import JobSpec
from trcomp.local import local_path

__all__ = [
    "DEFAULT_CHANNEL",
    "LocalJobChecks",
    "channel_paths",
    "check_entry_point",
    "check_job_name",
    "check_local_job",
    "check_writable",
    "claim_job_dir",
]

DEFAULT_CHANNEL = "training"
# SageMaker's rule for TrainingJobName (CreateTrainingJob API reference).
_JOB_NAME = re.compile(r"[a-zA-Z0-9](-*[a-zA-Z0-9]){0,62}")
# What the training toolkit accepts as sagemaker_program: a relative path of
# letters, digits and ._+- segments, not starting with '-', without '.' or '..' segments.
_PROGRAM_SEGMENT = re.compile(r"[A-Za-z0-9._+-]+")
_SHOWN = 80


def _shown(value: object) -> str:
    text = repr(value)
    return text if len(text) <= _SHOWN else text[: _SHOWN - 5] + "...'"


def check_job_name(name: str) -> str:
    """Refuse a job name SageMaker would refuse: 1 to 63 letters, digits and inner hyphens."""
    if not isinstance(name, str) or not _JOB_NAME.fullmatch(name):
        raise LocalModeError(
            f"job_name {_shown(name)} is not a valid SageMaker training job name: it must "
            "be 1 to 63 characters, letters, digits and hyphens, starting and ending with "
            "a letter or digit. Pass another job_name= (or none: one is generated)."
        )
    return name


def check_entry_point(entry_point: str, source_dir: str | None) -> str:
    """Refuse an entry point the training toolkit cannot run; return its program name."""
    program = entry_point if source_dir else Path(entry_point).name
    segments = program.split("/")
    bad = (
        not program
        or program.startswith("-")
        or any(s in ("", ".", "..") or not _PROGRAM_SEGMENT.fullmatch(s) for s in segments)
    )
    if bad:
        odd = sorted({c for c in program if not re.fullmatch(r"[A-Za-z0-9._+/-]", c)})
        why = f"it contains {', '.join(map(repr, odd))}" if odd else "not a plain relative path"
        raise LocalModeError(
            f"entry_point={_shown(entry_point)} cannot be run by SageMaker's training toolkit: "
            f"{why}. Rename the script to letters, digits and ._+- only (e.g. 'train.py'), "
            "relative to source_dir=."
        )
    return program


def check_writable(path: Path, what: str) -> None:
    """Refuse ``path`` unless it is, or can be created as, a directory we can write to."""
    probe = path
    while not probe.exists():
        if probe.parent == probe:
            break
        probe = probe.parent
    if not probe.is_dir():
        raise LocalModeError(
            f"{what} {str(path)!r} cannot be created: {str(probe)!r} is a file, not a "
            "directory. Choose a path under a directory."
        )
    if not os.access(probe, os.W_OK | os.X_OK):
        raise LocalModeError(
            f"{what} {str(path)!r} is not writable ({str(probe)!r} is read-only for this "
            "user or on a read-only file system). Choose a directory you can write to."
        )


def channel_paths(
    inputs: Any, local_only: bool, default_channel: str = DEFAULT_CHANNEL
) -> dict[str, Path]:
    """The host path of each local (``file://`` or plain path) input channel; each must exist.

    With ``local_only``, any other URI (``s3://``) is refused; without, it is skipped.
    """
    if inputs is None:
        return {}
    if isinstance(inputs, str | os.PathLike):
        inputs = {default_channel: str(inputs)}
    if not isinstance(inputs, Mapping):
        raise LocalModeError(
            f"inputs must be a URI or a dict of channel name to URI, got {type(inputs).__name__}"
        )
    channels = {}
    for name, value in inputs.items():
        uri = (
            getattr(value, "config", {})
            .get("DataSource", {})
            .get("S3DataSource", {})
            .get("S3Uri", value)
        )
        path = local_path(str(uri))
        if path is None:
            if not local_only:
                continue
            raise LocalModeError(
                f"input channel {name!r} is {_shown(str(uri))}, but process mode reads and "
                "writes local files only: pass a file:// URI or a path (use "
                "instance_type='ml.*' for S3 data)"
            )
        if not path.exists():
            raise LocalModeError(
                f"input channel {name!r}: {path} does not exist. Create it or fix the URI."
            )
        channels[str(name)] = path
    return channels


@dataclass(frozen=True)
class LocalJobChecks:
    """What the checks found: the job's name, channels and local directories."""

    name: str
    name_given: bool
    program: str
    channels: dict[str, Path]
    output_root: Path | None
    checkpoint_dir: Path | None


def _writable_local_dir(uri: Any, what: str) -> Path | None:
    """The local dir a ``file://`` URI (``what``) names, checked writable; else None."""
    directory = local_path(str(uri)) if uri else None
    if directory is not None:
        check_writable(directory, what)
    return directory


def check_local_job(
    spec: JobSpec,
    inputs: Any,
    job_name: str | None,
    *,
    local_only: bool,
    new_name: Callable[[], str],
) -> LocalJobChecks:
    """Every check of a local job that needs no Docker engine and creates nothing.

    ``new_name`` makes a job name as ``fit()`` does, for a job without ``job_name``.
    """
    entry_point = spec.entry_point
    if not entry_point:
        raise LocalModeError("a local job needs entry_point= (the training script to run)")
    program = check_entry_point(str(entry_point), spec.source_dir)
    if job_name is not None:
        check_job_name(job_name)
    name = check_job_name(job_name or new_name())
    output_root = _writable_local_dir(spec.output_path, "output_path")
    checkpoint_dir = _writable_local_dir(spec.checkpoint_s3_uri, "checkpoint_s3_uri")
    return LocalJobChecks(
        name=name,
        name_given=job_name is not None,
        program=program,
        channels=channel_paths(inputs, local_only),
        output_root=output_root,
        checkpoint_dir=checkpoint_dir,
    )


def claim_job_dir(
    root: Path, name: str, *, renamable: bool, new_name: Callable[[], str]
) -> tuple[str, Path]:
    """Create ``root/name`` as this job's own folder; return ``(name, folder)``.

    A folder that exists belongs to another job: a generated name is made again
    (a job started in the same millisecond), a name the user chose is refused.
    """
    root.mkdir(parents=True, exist_ok=True)
    for _ in range(20):
        folder = root / name
        try:
            folder.mkdir()
        except FileExistsError:
            if not renamable:
                raise LocalModeError(
                    f"{folder} already holds the artifacts of a job named {name!r}; trcomp "
                    "never overwrites them. Pass another job_name= or output_path=."
                ) from None
            time.sleep(0.002)
            name = check_job_name(new_name())
            continue
        return name, folder
    raise LocalModeError(f"could not create a folder of its own for the job under {root}")
