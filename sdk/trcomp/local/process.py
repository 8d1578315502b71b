"""Process mode: run a job on this machine without Docker.

Selected with ``instance_type="local_process"``. It lays out the same ``/opt/ml``
tree under a temporary directory, runs the training toolkit's ``train`` (which
hands over to ``trcomp_container.training:main``, as in the image) in a
subprocess with ``SAGEMAKER_BASE_DIR`` pointing at that tree, and packs
``model.tar.gz`` and ``output.tar.gz`` into ``<output_path>/<job name>/output/``,
the folder SageMaker uses, so no job overwrites another's artifacts.

Ctrl-C or SIGTERM stops the job as StopTrainingJob would (SIGTERM, SIGKILL after
the grace period; a second Ctrl-C kills it at once), packs what it saved, and
raises :class:`~trcomp.contract.errors.JobInterrupted` (SIGTERM:
:class:`~trcomp.contract.errors.JobTerminated`). If the ``fit()`` process dies, the job
gets SIGTERM from the kernel (parent-death signal) and stops itself.
"""

from __future__ import annotations

import contextlib
import importlib.util
import os
import shutil
import signal
import subprocess
import sys
import tarfile
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from sagemaker.exceptions import UnexpectedStatusException

from trcomp._sdk_compat import new_job_name, set_current_job_name
from trcomp.checkpoints import checkpoint_environment
from trcomp.contract.env import PREFIX
from trcomp.contract.errors import JobInterrupted, JobTerminated, LocalModeError
from trcomp.contract.instances import tpu_chips
from trcomp.contract.proctree import TreeProcess, outer_grace_s
from trcomp.image.uris import default_image, image_for
from trcomp.jobspec import JobSpec
from trcomp.local import local_path
from trcomp.local.interpreter import ENV_PREFIX, job_python
from trcomp.local.job_checks import check_local_job, claim_job_dir
from trcomp.shared_cache_checks import check_shared_cache

if TYPE_CHECKING:
    from sagemaker.estimator import EstimatorBase

__all__ = [
    "CONTAINER_MODULES",
    "ProcessJob",
    "ProcessJobFailed",
    "check_container_installed",
    "check_no_tpu",
    "plan_process_job",
    "run_process_job",
]

TRAINING_MODULE = "trcomp_container.training:main"
# What the toolkit's console script `train` runs, after the interpreter the job runs on
# (trcomp.local.interpreter.job_python: one whose torch is the job's version).
TRAIN_ARGS = ("-c", "from sagemaker_training.cli.train import main; main()")
# The container starts from a clean environment; on the host, these variables
# may have been set by earlier work in the calling process (torch.compile sets
# TORCHINDUCTOR_CACHE_DIR in os.environ), and would silently override what the
# entrypoint decides (caches under the checkpoint dir, backend settings). A job
# that needs one sets it through the estimator's `environment=`.
_NOT_INHERITED = (
    "SM_",
    PREFIX,
    "TORCHINDUCTOR_",
    "TRITON_",
    "XLA_",
    "PJRT_",
    "ACCELERATE_",
    "TORCH_COMPILE_",
    "TORCH_LOGS",
    "TORCH_TRACE",
    "USE_TORCH_XLA",
    "TORCHELASTIC_",
)
# Set by torchrun when fit() is called from one of its workers; the job's own
# launcher decides them.
_NOT_INHERITED_NAMES = frozenset(
    {
        "RANK",
        "LOCAL_RANK",
        "WORLD_SIZE",
        "LOCAL_WORLD_SIZE",
        "GROUP_RANK",
        "GROUP_WORLD_SIZE",
        "ROLE_RANK",
        "ROLE_NAME",
        "ROLE_WORLD_SIZE",
        "MASTER_ADDR",
        "MASTER_PORT",
    }
)


class ProcessJobFailed(UnexpectedStatusException):  # type: ignore[misc]
    """The job failed; ``exit_code`` is its exit code, ``job_dir`` keeps its files."""

    def __init__(self, message: str, exit_code: int, job_dir: Path) -> None:
        super().__init__(
            message=message, allowed_statuses=["Completed", "Stopped"], actual_status="Failed"
        )
        self.exit_code = exit_code
        self.job_dir = job_dir


def inherited_environment(environ: dict[str, str]) -> dict[str, str]:
    """The caller's environment without what a job's container would not have."""
    return {
        key: value
        for key, value in environ.items()
        if key not in _NOT_INHERITED_NAMES and not key.startswith(_NOT_INHERITED)
    }


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


# What the job imports in this Python: the toolkit (`train`) and torch, both from the
# container extra. Checked by name only (find_spec): importing torch takes seconds.
CONTAINER_MODULES = ("sagemaker_training", "torch")


def check_container_installed() -> None:
    """Refuse a process-mode job when this Python lacks the container extra.

    Process mode runs the image's entrypoint in ``sys.executable``; without the
    toolkit or torch the job would die in ``train`` with no failure file.
    """
    missing = [name for name in CONTAINER_MODULES if importlib.util.find_spec(name) is None]
    if missing:
        raise LocalModeError(
            f"instance_type='local_process' runs the job in this Python ({sys.executable}), "
            f"which does not have {' or '.join(missing)} (trcomp's container extra): "
            'install it with pip install "trcomp[container]", or run the job in Docker '
            "(instance_type='local') or on SageMaker"
        )


def check_no_tpu(spec: JobSpec, tpu_chips: int) -> None:
    """Refuse a compiled job on a TPU host when its torch version has no XLA engine.

    On a TPU ``auto`` means XLA and inductor cannot drive the chips; torch versions
    without torch-xla (2.14) have neither.
    """
    config = spec.compiler_config
    image = image_for(spec.framework_version)
    if not tpu_chips or config is None or not config.enabled or image is None or image.runs_xla:
        return
    raise LocalModeError(
        f"this host has TPU chips, which only torch-xla drives, but framework_version="
        f"{spec.framework_version!r} (torch {image.torch}) has no torch-xla: pass "
        f"framework_version={default_image().short!r} to compile for the TPU with XLA"
    )


def _local_path(uri: str, what: str) -> Path:
    path = local_path(uri)
    if path is not None:
        return path
    raise LocalModeError(
        f"{what} is {uri[:200]!r}, but process mode reads and writes local files only: "
        "pass a file:// URI or a path (use instance_type='ml.*' for S3 data)"
    )


def _interpreter_vars(environ: dict[str, str]) -> dict[str, str]:
    # Read from the caller's environment; the job's own does not inherit TRCOMP_*.
    return {key: value for key, value in environ.items() if key.startswith(ENV_PREFIX)}


def plan_process_job(
    spec: JobSpec, estimator: EstimatorBase, inputs: Any = None, job_name: str | None = None
) -> tuple[ProcessJob, dict[str, Any]]:
    """Check and decide everything about a process-mode job; create its folders.

    Every refusal comes before anything is created. Returns the job and the
    keyword arguments for ``lay_out_tree``. ``estimator`` gives the job's
    hyperparameters and job names, as the SDK makes them.
    """
    env = inherited_environment(dict(os.environ))
    env.update({str(k): str(v) for k, v in spec.environment.items()})
    python = job_python(spec.framework_version, {**_interpreter_vars(dict(os.environ)), **env})
    if python == sys.executable:
        check_container_installed()
    check_no_tpu(spec, tpu_chips(os.environ))
    if spec.instance_count != 1:
        raise LocalModeError(
            "process mode runs one instance; for instance_count > 1 use Docker local mode "
            "(instance_type='local'), which starts one container per instance"
        )
    if spec.output_path:
        _local_path(str(spec.output_path), "output_path")
    checkpoint_uri = spec.checkpoint_s3_uri
    checkpoint_dir = (
        _local_path(str(checkpoint_uri), "checkpoint_s3_uri") if checkpoint_uri else None
    )
    checks = check_local_job(
        spec, inputs, job_name, local_only=True, new_name=lambda: new_job_name(estimator)
    )
    entry_point = str(spec.entry_point)
    source_dir = spec.source_dir
    script = Path(source_dir or ".", entry_point) if source_dir else Path(entry_point)
    if not script.is_file():
        raise LocalModeError(
            f"entry point {str(script)!r} does not exist: check entry_point= and source_dir="
        )
    check_shared_cache(
        spec.compiler_config,
        mode="process",
        environment=spec.environment,
        hyperparameters=estimator.hyperparameters(),
    )
    # Nothing was created before this line.
    output_root = checks.output_root or Path(tempfile.gettempdir()) / "trcomp-jobs"
    name, job_dir = claim_job_dir(
        output_root,
        checks.name,
        renamable=not checks.name_given,
        new_name=lambda: new_job_name(estimator),
    )
    base_dir = Path(tempfile.mkdtemp(prefix=f"trcomp-{name[:40]}-"))
    env.update(
        {
            "SAGEMAKER_BASE_DIR": str(base_dir),
            "SAGEMAKER_TRAINING_MODULE": TRAINING_MODULE,
            "TRAINING_JOB_NAME": name,
            "PYTHONUNBUFFERED": "1",
        }
    )
    # The job's checkpoints/ is linked to checkpoint_dir, so only the URI is set.
    env.update(checkpoint_environment(None, checkpoint_dir))
    command = [python, *TRAIN_ARGS]
    job = ProcessJob(name, base_dir, job_dir / "output", checkpoint_dir, command, env)
    hyperparameters = {
        key: value
        for key, value in estimator.hyperparameters().items()
        if key not in ("sagemaker_program", "sagemaker_submit_directory")
    }
    tree = {
        "hyperparameters": hyperparameters,
        "encoded": True,
        "channels": checks.channels,
        "source_dir": Path(source_dir) if source_dir else None,
        "entry_point": entry_point if source_dir else str(script),
        "hosts": ("localhost",),
        "current_host": "localhost",
        "instance_type": "local_process",
        "job_name": name,
    }
    return job, tree


def run_process_job(
    spec: JobSpec,
    estimator: EstimatorBase,
    inputs: Any = None,
    job_name: str | None = None,
    logs: Any = "All",
    wait: bool = True,
    on_packed: Callable[[ProcessJob], None] | None = None,
) -> ProcessJob:
    """Run the job in a subprocess; raise if it fails (as ``fit()`` does).

    ``on_packed`` is called with the job once its artifacts are packed, before
    a failure is raised (the estimator's ``model_data`` names them).
    """
    from trcomp.local.tree import lay_out_tree

    if not wait:
        raise LocalModeError("process mode always waits for the job: call fit(wait=True)")
    job, tree = plan_process_job(spec, estimator, inputs, job_name)
    try:
        lay_out_tree(job.base_dir, **tree)
    except BaseException:
        shutil.rmtree(job.base_dir, ignore_errors=True)
        with contextlib.suppress(OSError):
            job.output_dir.parent.rmdir()  # still empty: nothing ran
        raise
    if job.checkpoint_dir is not None:
        _link_checkpoints(job)
    set_current_job_name(estimator, job.name)
    print(f"[trcomp] process mode: job {job.name} in {job.base_dir}", flush=True)
    started = time.monotonic()
    out = subprocess.DEVNULL if logs in (None, "None", False) else None
    process = TreeProcess(job.command, env=job.env, stdout=out, stderr=out)
    returncode, stopped_by, _ = process.wait(outer_grace_s(job.env), f"job {job.name}")
    job.exit_code = 128 - returncode if returncode < 0 else returncode
    job.wall_s = time.monotonic() - started
    _pack(job)
    if on_packed is not None:
        on_packed(job)
    print(
        f"[trcomp] job {job.name} finished with exit code {job.exit_code} in "
        f"{job.wall_s:.1f}s; model: {job.model_data}; output: {job.output_data}",
        flush=True,
    )
    if stopped_by is not None:
        message = (
            f"job {job.name} was stopped by {signal.Signals(stopped_by).name} (exit code "
            f"{job.exit_code}); what it saved is packed in {job.output_dir} (model.tar.gz, "
            f"output.tar.gz) and its files are kept in {job.base_dir}"
        )
        if job.checkpoint_dir is not None:
            message += f"; its checkpoints are in {job.checkpoint_dir}"
        if stopped_by == signal.SIGINT:
            raise JobInterrupted(message, job.exit_code)
        print(f"[trcomp] {message}", file=sys.stderr, flush=True)
        raise JobTerminated(message, job.exit_code, stopped_by)
    if job.exit_code != 0:
        raise ProcessJobFailed(
            f"Error for Training job {job.name}: Failed. Reason: {_failure_reason(job)}",
            job.exit_code,
            job.base_dir,
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
    where = f"exit code {job.exit_code}; job files kept in {job.base_dir}"
    if failure.is_file():
        return f"{failure.read_text().strip()}\n({where})"
    return f"train exited with code {job.exit_code} and wrote no failure file ({where})"
