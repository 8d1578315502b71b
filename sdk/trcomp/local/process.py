"""Process mode: run a job on this machine without Docker.

Selected with ``instance_type="local_process"``. It lays out the same ``/opt/ml``
tree under a temporary directory, runs the training toolkit's ``train`` (which
hands over to ``trcomp_container.training:main``, as in the image) in a
subprocess with ``SAGEMAKER_BASE_DIR`` pointing at that tree, and packs
``model.tar.gz`` and ``output.tar.gz`` into ``output_path`` as SageMaker local
mode does.
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import tarfile
import tempfile
import time
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from trcomp._sdk_compat import new_job_name, set_current_job_name
from trcomp.errors import LocalModeError
from trcomp.local import local_path

__all__ = ["ProcessJob", "plan_process_job", "run_process_job"]

TRAINING_MODULE = "trcomp_container.training:main"
# What the toolkit's console script `train` runs, with this interpreter.
TRAIN_COMMAND = (sys.executable, "-c", "from sagemaker_training.cli.train import main; main()")
GRACE_SECONDS = 30.0
# The container starts from a clean environment; on the host, these variables
# may have been set by earlier work in the calling process (torch.compile sets
# TORCHINDUCTOR_CACHE_DIR in os.environ), and would silently override what the
# entrypoint decides (caches under the checkpoint dir, backend settings). A job
# that needs one sets it through the estimator's `environment=`.
_NOT_INHERITED = (
    "SM_",
    "TRCOMP_",
    "TORCHINDUCTOR_",
    "TRITON_",
    "XLA_",
    "PJRT_",
    "ACCELERATE_",
    "TORCH_COMPILE_",
    "TORCH_LOGS",
    "TORCH_TRACE",
    "USE_TORCH_XLA",
)
DEFAULT_CHANNEL = "training"


@dataclass
class ProcessJob:
    """A process-mode job: where it runs, what it runs, and where results go."""

    name: str
    base_dir: Path
    output_dir: Path
    checkpoint_dir: Path | None
    command: list[str]
    env: dict[str, str]
    model_data: str = ""
    output_data: str = ""
    exit_code: int | None = None
    wall_s: float = 0.0


def _local_path(uri: str, what: str) -> Path:
    path = local_path(uri)
    if path is not None:
        return path
    raise LocalModeError(
        f"{what} is {uri!r}, but process mode reads and writes local files only: "
        "pass a file:// URI or a path (use instance_type='ml.*' for S3 data)"
    )


def _channels(inputs: Any) -> dict[str, Path]:
    if inputs is None:
        return {}
    if isinstance(inputs, str | os.PathLike):
        inputs = {DEFAULT_CHANNEL: str(inputs)}
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
        path = _local_path(str(uri), f"input channel {name!r}")
        if not path.exists():
            raise LocalModeError(f"input channel {name!r}: {path} does not exist")
        channels[name] = path
    return channels


def plan_process_job(
    estimator: Any, inputs: Any = None, job_name: str | None = None
) -> tuple[ProcessJob, dict[str, Any]]:
    """Decide everything about a process-mode job without running it.

    Returns the job and the keyword arguments for ``lay_out_tree``.
    """
    if int(getattr(estimator, "instance_count", 1) or 1) != 1:
        raise LocalModeError(
            "process mode runs one instance; for instance_count > 1 use Docker local mode "
            "(instance_type='local'), which starts one container per instance"
        )
    entry_point = getattr(estimator, "entry_point", None)
    if not entry_point:
        raise LocalModeError("process mode needs entry_point= (the training script to run)")
    source_dir = getattr(estimator, "source_dir", None)
    script = Path(source_dir or ".", entry_point) if source_dir else Path(entry_point)
    if not script.is_file():
        raise LocalModeError(
            f"entry point {str(script)!r} does not exist: check entry_point= and source_dir="
        )
    name = job_name or new_job_name(estimator)
    base_dir = Path(tempfile.mkdtemp(prefix=f"trcomp-{name[:40]}-"))
    output_path = getattr(estimator, "output_path", None)
    output_dir = (
        _local_path(output_path, "output_path")
        if output_path
        else Path(tempfile.gettempdir()) / "trcomp-jobs" / name
    )
    checkpoint_uri = getattr(estimator, "checkpoint_s3_uri", None)
    checkpoint_dir = _local_path(checkpoint_uri, "checkpoint_s3_uri") if checkpoint_uri else None
    env = {key: value for key, value in os.environ.items() if not key.startswith(_NOT_INHERITED)}
    env.update({str(k): str(v) for k, v in (getattr(estimator, "environment", None) or {}).items()})
    env.update(
        {
            "SAGEMAKER_BASE_DIR": str(base_dir),
            "SAGEMAKER_TRAINING_MODULE": TRAINING_MODULE,
            "TRAINING_JOB_NAME": name,
            "PYTHONUNBUFFERED": "1",
        }
    )
    job = ProcessJob(name, base_dir, output_dir, checkpoint_dir, list(TRAIN_COMMAND), env)
    hyperparameters = {
        key: value
        for key, value in estimator.hyperparameters().items()
        if key not in ("sagemaker_program", "sagemaker_submit_directory")
    }
    tree = {
        "hyperparameters": hyperparameters,
        "encoded": True,
        "channels": _channels(inputs),
        "source_dir": Path(source_dir) if source_dir else None,
        "entry_point": entry_point if source_dir else str(script),
        "hosts": ("localhost",),
        "current_host": "localhost",
        "instance_type": "local_process",
        "job_name": name,
    }
    return job, tree


def run_process_job(
    estimator: Any,
    inputs: Any = None,
    job_name: str | None = None,
    logs: Any = "All",
    wait: bool = True,
) -> ProcessJob:
    """Run the estimator's job in a subprocess; raise if it fails (as ``fit()`` does)."""
    from trcomp.local.tree import lay_out_tree

    if not wait:
        raise LocalModeError("process mode always waits for the job: call fit(wait=True)")
    job, tree = plan_process_job(estimator, inputs, job_name)
    lay_out_tree(job.base_dir, **tree)
    if job.checkpoint_dir is not None:
        _link_checkpoints(job)
    set_current_job_name(estimator, job.name)
    print(f"[trcomp] process mode: job {job.name} in {job.base_dir}", flush=True)
    started = time.monotonic()
    job.exit_code = _run(job.command, job.env, quiet=logs in (None, "None", False))
    job.wall_s = time.monotonic() - started
    _pack(job)
    estimator._trcomp_process_job = job
    print(
        f"[trcomp] job {job.name} finished with exit code {job.exit_code} in "
        f"{job.wall_s:.1f}s; model: {job.model_data}; output: {job.output_data}",
        flush=True,
    )
    if job.exit_code != 0:
        from sagemaker.exceptions import UnexpectedStatusException

        reason = _failure_reason(job)
        raise UnexpectedStatusException(
            message=f"Error for Training job {job.name}: Failed. Reason: {reason}",
            allowed_statuses=["Completed", "Stopped"],
            actual_status="Failed",
        )
    shutil.rmtree(job.base_dir, ignore_errors=True)
    return job


def _link_checkpoints(job: ProcessJob) -> None:
    # The job writes its checkpoints (and compile caches) straight into the
    # user's checkpoint directory, as SageMaker's checkpoint sync would.
    assert job.checkpoint_dir is not None
    job.checkpoint_dir.mkdir(parents=True, exist_ok=True)
    link = job.base_dir / "checkpoints"
    shutil.rmtree(link, ignore_errors=True)
    link.symlink_to(job.checkpoint_dir, target_is_directory=True)


def _run(command: list[str], env: dict[str, str], quiet: bool) -> int:
    out = subprocess.DEVNULL if quiet else None
    proc = subprocess.Popen(command, env=env, stdout=out, stderr=out, start_new_session=True)
    try:
        return proc.wait()
    except KeyboardInterrupt:
        # Ctrl-C: give the job its SIGTERM grace period to checkpoint, like StopTrainingJob.
        print("[trcomp] interrupted: stopping the job (SIGTERM)", file=sys.stderr, flush=True)
        os.killpg(proc.pid, signal.SIGTERM)
        try:
            proc.wait(timeout=GRACE_SECONDS)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
        raise


def _pack(job: ProcessJob) -> None:
    job.output_dir.mkdir(parents=True, exist_ok=True)
    model = job.output_dir / "model.tar.gz"
    output = job.output_dir / "output.tar.gz"
    _tar(job.base_dir / "model", model)
    _tar(job.base_dir / "output", output)
    job.model_data = f"file://{model}"
    job.output_data = f"file://{output}"


def _tar(source: Path, target: Path) -> None:
    with tarfile.open(target, "w:gz") as tar:
        for item in sorted(source.iterdir()) if source.is_dir() else []:
            tar.add(item, arcname=item.name)


def _failure_reason(job: ProcessJob) -> str:
    failure = job.base_dir / "output" / "failure"
    if failure.is_file():
        text = failure.read_text().strip()
        return f"{text}\n(job files kept in {job.base_dir})"
    return f"train exited with code {job.exit_code} and wrote no failure file ({job.base_dir})"
