"""``main()``: what the training toolkit's ``train`` runs (``SAGEMAKER_TRAINING_MODULE``).

Reads the job from the toolkit, rebuilds the compiler config with the SDK's
own model, resolves the backend, checks it can start, runs the user's entry
point and reports: metric lines and ``output/data/compiler/summary.json`` on
every way out, and exactly one ``output/failure`` with an exit code that
says what went wrong (see :mod:`trcomp_container.failures`).

``python -m trcomp_container.training`` does what ``train`` does, for hosts
where the toolkit's console script is not on PATH.
"""

from __future__ import annotations

import dataclasses
import os
import shutil
import subprocess
import sys
import tempfile
import time
import traceback
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from trcomp.contract.config import TrainingCompilerConfig
from trcomp.contract.env import LAUNCHER_ENV, SECRET_NAMES, for_training
from trcomp.contract.errors import CompilerConfigError, SharedCacheError
from trcomp.contract.keys import CHECKPOINT_URI_ENV
from trcomp.contract.proctree import grace_s
from trcomp_container import environ_block, hyperparameters
from trcomp_container import summary as summary_module
from trcomp_container.backends import ConcreteBackend, Engine, resolve_backend, resolve_engine
from trcomp_container.caching import job_setup, lineage
from trcomp_container.caching.lineage_signed import SignedLineage
from trcomp_container.caching.shared import SharedCache
from trcomp_container.devices import Devices, detect_devices
from trcomp_container.environment import CACHE_LOCATION_ENV, build_environment
from trcomp_container.failures import (
    ExitCode,
    JobFailed,
    describe_exit,
    torchrun_root_cause,
    write_failure,
)
from trcomp_container.gpu_setup import launch_environment, require_visible_gpus
from trcomp_container.hints import hint_for
from trcomp_container.inprocess.redis_handoff import TORCHRUN
from trcomp_container.job import Job
from trcomp_container.launch import (
    LaunchPlan,
    build_command,
    distribution_of,
    nproc_per_node,
    single_process_note,
)
from trcomp_container.probe import check_inductor_options, run_probe
from trcomp_container.runner import RunResult, run, wait_for_hosts

__all__ = ["main", "run_job"]

_TAIL_LINES = 25


@dataclass
class _Report:
    """What goes into summary.json besides the per-rank metrics."""

    facts: dict[str, Any] = field(default_factory=dict)
    warnings: list[str] = field(default_factory=list)
    shared: SharedCache | None = None
    keep_lineage: bool = True
    keyed: bool = False
    lineage: SignedLineage | None = None


def main() -> None:
    """Run the job; raise :class:`JobFailed` (the toolkit exits with its ``errno``)."""
    # The training processes are this process's children: they could read the key in the
    # environment this process was started with (os.environ keeps it).
    environ_block.blank(SECRET_NAMES)
    job = Job.from_toolkit()
    exit_code, reason = run_job(job)
    if exit_code != ExitCode.OK:
        raise JobFailed(reason, exit_code)


def run_job(job: Job) -> tuple[int, str]:
    """Run ``job`` end to end; return ``(exit code, reason)`` after writing every report."""
    started = time.time()
    report = _Report(
        facts={"devices": None, "backend": None, "engine": None, "requested_backend": None},
        keyed=job_setup.is_keyed(job.environ),
    )
    metrics_dir = job.paths.compiler / "ranks"
    shutil.rmtree(metrics_dir, ignore_errors=True)
    # Debug logs (TORCH_LOGS_OUT) and the hook write here; their parent must exist.
    metrics_dir.mkdir(parents=True, exist_ok=True)
    scratch = Path(tempfile.mkdtemp(prefix="trcomp-scratch-"))
    exit_code = int(ExitCode.INTERNAL)
    try:
        exit_code, reason = _run(job, report, metrics_dir, scratch)
    except JobFailed as failed:
        exit_code, reason = failed.errno, failed.reason
    except Exception as exc:  # a trcomp bug: still write the failure file and summary
        tail = "".join(traceback.format_exc().splitlines(keepends=True)[-_TAIL_LINES:])
        exit_code = ExitCode.INTERNAL
        reason = f"trcomp internal error: {type(exc).__name__}: {exc}; please report it\n{tail}"
    finally:
        live = _live_cache(scratch)
        if live.is_dir() and report.keep_lineage:  # what the job compiled is kept, always
            _persist_lineage(job, report, live)
        if report.shared is not None:  # shared by successful jobs only
            seen = len(report.shared.warnings)
            report.facts["shared_cache"] = report.shared.finish(live, succeeded=exit_code == 0)
            _warn(report, *report.shared.warnings[seen:])
        shutil.rmtree(scratch, ignore_errors=True)
    report.facts.update(
        exit_code=exit_code,
        outcome=reason.splitlines()[0] if reason else "success",
        duration_s=round(time.time() - started, 3),
    )
    _report(job, report, metrics_dir)
    if exit_code != ExitCode.OK:
        write_failure(job.paths.output, reason)
        first_line = reason.splitlines()[0] if reason else "unknown reason"
        print(
            f"[trcomp] job failed (exit code {exit_code}): {first_line} "
            f"(full reason in {job.paths.output / 'failure'})",
            file=sys.stderr,
        )
    return exit_code, reason


def _run(job: Job, report: _Report, metrics_dir: Path, scratch: Path) -> tuple[int, str]:
    hyperparameters.check_names(job.hyperparameter_names)  # compiler on or off
    try:
        config = TrainingCompilerConfig.from_hyperparameters(job.framework_params)
    except CompilerConfigError as exc:
        raise JobFailed(
            f"invalid compiler config: {exc}. Fix the TrainingCompilerConfig passed as "
            "compiler_config= (the container rebuilds it from the job's hyperparameters).",
            ExitCode.CONFIG,
        ) from None
    devices = detect_devices(job.num_gpus, job.environ)
    report.facts.update(
        devices=str(devices),
        requested_backend=config.backend,
        debug=config.debug,
        auto_compile=config.auto_compile,
    )
    require_visible_gpus(job, devices)
    _warn(report, *devices.notes)
    # Resolved once for the job; what needs them gets them as arguments.
    backend = resolve_backend(config, devices)
    engine = resolve_engine(config, backend, devices)
    # Known before anything else can fail: the summary must not say "compiler off".
    report.facts.update(backend=backend)
    distribution = distribution_of(job.framework_params)
    _check_jax_distribution(engine, distribution, job.hosts)
    entry_point = _prepare_code(job)
    base_env = _training_base(config, job, report)

    # Before the start-up check, which compiles a tiny graph into the same cache.
    cache_warm = config.cache and any(p.is_file() for p in job.paths.cache.rglob("*"))
    live_cache = _live_cache(scratch)
    report.keep_lineage = config.cache
    try:  # shared first, lineage second: the lineage adds only what the shared cache lacks
        report.shared = job_setup.open_for_job(config, job, devices, live_cache, engine=engine)
    except SharedCacheError as exc:
        raise JobFailed(str(exc), ExitCode.CONFIG) from None
    if config.cache and backend is not None:
        try:
            report.lineage = job_setup.signed_lineage(
                job.environ, report.shared, timeout_s=config.shared_cache_timeout_s
            )
        except SharedCacheError as exc:
            raise JobFailed(str(exc), ExitCode.CONFIG) from None
        restored = job_setup.restore_lineage(
            job.paths.cache, live_cache, report.shared, report.lineage
        )
        report.facts["cache_files_restored"] = restored
        if report.lineage is not None:  # what was not restored, and why, is in the summary
            report.facts["lineage"] = report.lineage.facts
            _warn(report, *report.lineage.warnings)
            cache_warm = restored > 0
    if report.shared is not None:
        report.facts["shared_cache"] = report.shared.facts
        _warn(report, *report.shared.warnings)
        cache_warm = cache_warm or report.shared.warm
    variables = job_setup.cache_variables(config, backend, job, report.shared, _cache_location(job))

    def environment(chosen: ConcreteBackend | None, fallback: str | None) -> dict[str, str]:
        env = build_environment(
            config=config,
            backend=chosen,
            engine=engine if chosen is not None else None,  # None after a fallback to eager
            devices=devices,
            paths=job.paths,
            base_env=base_env,
            metrics_dir=metrics_dir,
            scratch_dir=scratch,
            fallback_reason=fallback,
            cache_dir=live_cache,
            keyed=report.keyed,
        )
        if chosen is not None:  # a value the user set wins, as for the other cache variables
            env.update({k: v for k, v in variables.items() if k not in base_env})
        return env

    env = environment(backend, None)
    if backend is not None or devices.gpus:
        backend, env, devices = _check_backend(
            config, backend, devices, env, report, environment, engine=engine
        )
        if backend is None:  # a fallback to eager: nothing compiles
            engine = None
    if backend == "inductor" and config.inductor_options:
        _check_inductor_options(config, env)
    cache_dir = job.paths.cache if (config.cache and backend) else None
    shared_on = report.shared is not None
    report.facts.update(
        backend=backend,
        engine=engine,
        distribution=distribution,
        cache_dir=_cache_location(job) if cache_dir else None,
        cache_warm=bool((cache_dir or shared_on) and cache_warm),
        compiler_dir=str(job.paths.compiler),
    )
    nproc = nproc_per_node(distribution, backend, devices, job.environ)
    # The jax engine's one process drives every GPU of the host: no warning there.
    note = single_process_note(distribution, devices, job.instance_type or None)
    if note and engine != "jax":
        _warn(report, note)
    extra, warnings = launch_environment(job, backend, nproc, env)
    env.update(extra)
    _warn(report, *warnings)
    command = build_command(
        code_dir=job.paths.code,
        entry_point=entry_point,
        user_args=job.user_args,
        distribution=distribution,
        nproc=nproc,
        hosts=job.hosts,
        current_host=job.current_host,
        environ=job.environ,
    )
    # Under torchrun, the agent's hook leaves the Redis handoff to the workers it starts.
    env[LAUNCHER_ENV] = TORCHRUN if distribution != "none" else "direct"
    plan = LaunchPlan(command, env, job.paths.code)
    report.facts.update(command=command, nproc_per_node=nproc, hosts=job.hosts)
    wait_for_hosts(job.hosts)
    print(
        f"[trcomp] backend={backend or 'eager'} engine={engine or 'eager'} devices={devices} "
        f"command={command}",
        flush=True,
    )
    result = run(plan, grace_s(job.environ))
    return _outcome(result, metrics_dir, backend, torchrun=distribution != "none")


def _training_base(config: TrainingCompilerConfig, job: Job, report: _Report) -> dict[str, str]:
    """What the training processes get of the entrypoint's environment and the toolkit's
    (``SM_*``): never a copy (:func:`trcomp.contract.env.for_training`). The team's key,
    the Redis password and every other ``TRCOMP_*`` name not allow-listed stay here; in a
    job with a shared cache or a key, so do torch's remote-cache variables, which would
    let a process without the start-up hook read unsigned values."""
    base, dropped = for_training(
        {**job.environ, **job.toolkit_env},
        drop_torch_remote_cache=config.shared_cache is not None or report.keyed,
    )
    if report.keyed:  # the compilers load only the live cache, which holds nothing unchecked
        dropped += sorted(name for name in CACHE_LOCATION_ENV if base.pop(name, None) is not None)
    if dropped:
        _warn(
            report,
            f"not passed to the training processes: {', '.join(dropped)} (trcomp variables "
            "it does not know, or torch's remote-cache variables in a job with a shared cache "
            "or a key, where only the start-up hook turns those caches on, and signs; in a job "
            "with a key, the compilers' cache dirs too, which would load unchecked code: "
            "docs/environment.md)",
        )
    return base


def _persist_lineage(job: Job, report: _Report, live: Path) -> None:
    """Copy what the job compiled into its checkpoint location; a keyed job signs the list
    of what is there (:mod:`~trcomp_container.caching.lineage_signed`), and keeps nothing
    when it never read its key: files no keyed job signed are never restored anyway."""
    if not report.keyed:
        report.facts["cache_files_saved"] = lineage.persist(live, job.paths.cache)
    elif report.lineage is not None:
        report.facts["cache_files_saved"] = report.lineage.persist(live, job.paths.cache)
        report.facts["lineage"] = report.lineage.facts


def _warn(report: _Report, *warnings: str) -> None:
    for warning in warnings:
        report.warnings.append(warning)
        print(f"[trcomp] WARNING: {warning}", file=sys.stderr, flush=True)


def _live_cache(scratch: Path) -> Path:
    """Where the compilers write while the job runs (local disk, not the synced checkpoints)."""
    return scratch / "compile-cache"


def _prepare_code(job: Job) -> str:
    from sagemaker_training import entry_point as toolkit_entry_point
    from sagemaker_training import errors as toolkit_errors
    from sagemaker_training import files

    name = job.entry_point
    if not name or name == "None":
        raise JobFailed(
            "no entry point: the job has no sagemaker_program hyperparameter. Pass "
            "entry_point= (and source_dir=) to the estimator.",
            ExitCode.NO_ENTRY_POINT,
        )
    if job.module_dir and Path(job.module_dir) != job.paths.code:
        files.download_and_extract(uri=job.module_dir, path=str(job.paths.code))
    if not (job.paths.code / name).is_file():
        present = (
            sorted(p.name for p in job.paths.code.iterdir())[:20] if job.paths.code.is_dir() else []
        )
        raise JobFailed(
            f"entry point {name!r} not found in {job.paths.code} (it holds: "
            f"{', '.join(present) or 'nothing'}). Set entry_point= to a file inside source_dir=.",
            ExitCode.NO_ENTRY_POINT,
        )
    try:
        toolkit_entry_point.install(name=name, path=str(job.paths.code), capture_error=True)
    except toolkit_errors.ClientError as exc:
        raise JobFailed(f"could not prepare the entry point {name!r}: {exc}", 1) from None
    return name


def _cache_location(job: Job) -> str:
    """Where the compile cache is kept: the user's checkpoint location when it is known."""
    uri = job.environ.get(CHECKPOINT_URI_ENV, "")
    if uri:
        return f"{uri.rstrip('/')}/{job.paths.cache.name}"
    return str(job.paths.cache)


def _check_inductor_options(config: TrainingCompilerConfig, env: dict[str, str]) -> None:
    try:
        found = check_inductor_options(config.inductor_options, config.mode, env)
    except (RuntimeError, OSError, subprocess.SubprocessError) as exc:
        reason = f"cannot check inductor_options: {exc}"
        raise JobFailed(reason, ExitCode.COMPILER_UNAVAILABLE) from None
    if found.unknown:
        unknown = found.unknown
        raise JobFailed(
            f"inductor_options {', '.join(map(repr, unknown))} "
            f"{'is not an option' if len(unknown) == 1 else 'are not options'} of this "
            "container's torch._inductor.config. Fix the name(s) in "
            "TrainingCompilerConfig(inductor_options=...) or drop them.",
            ExitCode.CONFIG,
        )
    if found.contradicted:
        pairs = "; ".join(
            f"{key}={mine!r} but mode={config.mode!r} sets {key}={theirs!r}"
            for key, (mine, theirs) in found.contradicted.items()
        )
        raise JobFailed(
            f"inductor_options contradict the mode: {pairs}. torch.compile applies the "
            "mode's value for the graphs it compiles, so the option would be ignored. "
            "Drop the option from TrainingCompilerConfig(inductor_options=...), or pick "
            "a mode that does not set it.",
            ExitCode.CONFIG,
        )


def _check_backend(
    config: TrainingCompilerConfig,
    backend: ConcreteBackend | None,
    devices: Devices,
    env: dict[str, str],
    report: _Report,
    environment: Callable[[ConcreteBackend | None, str | None], dict[str, str]],
    *,
    engine: Engine | None,
) -> tuple[ConcreteBackend | None, dict[str, str], Devices]:
    """Probe the backend (or, compiler off, torch's view of the GPUs) in a child.

    ``engine`` is the backend's, resolved with it. Returns the backend to run
    (None after a fallback to eager), its environment and the devices, with the
    GPU count torch actually sees.
    """
    result = run_probe("jax" if engine == "jax" else (backend or "eager"), devices.gpus, env)
    report.facts["hardware"] = result.hardware
    if devices.gpus and result.gpus_seen and result.gpus_seen != devices.gpus:
        _warn(
            report,
            f"nvidia-smi and CUDA_VISIBLE_DEVICES give {devices.gpus} GPU(s) but torch sees "
            f"{result.gpus_seen}: the job uses the {result.gpus_seen} torch sees",
        )
        devices = dataclasses.replace(devices, gpus=result.gpus_seen)
        report.facts["devices"] = str(devices)
    if result.ok:
        return backend, env, devices
    if devices.gpus and not result.gpus_seen:
        what = f"backend={backend!r}" if backend else "torch"
        raise JobFailed(
            f"{what} cannot drive the {devices} of this host: {result.reason}. "
            + ("Use backend='inductor' (or 'auto') on NVIDIA GPUs; " if backend == "xla" else "")
            + "trcomp never trains on CPU while GPUs are present.",
            ExitCode.COMPILER_UNAVAILABLE,
        )
    if backend is None:
        raise JobFailed(
            f"torch cannot start on the {devices}: {result.reason}. Fix the image.",
            ExitCode.COMPILER_UNAVAILABLE,
        )
    if config.fallback == "fail":
        raise JobFailed(
            f"the {backend} compiler cannot start: {result.reason}. Fix the image, or "
            "set fallback='eager' to run uncompiled.",
            ExitCode.COMPILER_UNAVAILABLE,
        )
    warning = (
        f"the {backend} compiler cannot start ({result.reason}); running EAGER (uncompiled) "
        f"on the {devices} because fallback='eager'"
    )
    _warn(report, warning)
    return None, environment(None, warning), devices


def _check_jax_distribution(engine: str | None, distribution: str, hosts: list[str]) -> None:
    """The jax engine drives a host's devices from one process, on one host."""
    if engine != "jax":
        return
    if distribution != "none":
        raise JobFailed(
            f"distribution {distribution!r} starts one process per device, but the jax "
            "engine of backend='xla' drives all devices of a host from one process: drop "
            "the distribution, or use backend='inductor'",
            ExitCode.CONFIG,
        )
    if len(hosts) > 1:
        raise JobFailed(
            f"the jax engine of backend='xla' runs on one host; this job has {len(hosts)} "
            "(multi-host JAX is not supported yet): use instance_count=1, or "
            "backend='inductor' with torch_distributed",
            ExitCode.CONFIG,
        )


def _outcome(
    result: RunResult, metrics_dir: Path, backend: ConcreteBackend | None, *, torchrun: bool
) -> tuple[int, str]:
    if result.stopped_by is not None:
        how = describe_exit(result.returncode)[1]
        return 128 + result.stopped_by, (
            f"training was stopped by signal {result.stopped_by} (StopTrainingJob or Ctrl-C); "
            f"the script {how} after the SIGTERM. Files it saved under model/ and "
            "checkpoints/ are kept."
        )
    if result.returncode == 0:
        return ExitCode.OK, ""
    exit_code, how = describe_exit(result.returncode)
    root_cause = torchrun_root_cause(result.stderr_tail) if torchrun else None
    if root_cause is not None and root_cause[1] < 0:
        # A worker died of a signal: report that signal's code, not torchrun's 1.
        rank, returncode = root_cause
        exit_code, how = describe_exit(returncode)
        how = f"{how} (rank {rank}; torchrun stopped the other workers)"
    errors = [r.error for r in summary_module.read_rank_records(metrics_dir) if r.error]
    if errors:
        error = errors[0]
        hint = hint_for(backend, error)
        fix = f"\nFix: {hint}" if hint else ""
        return exit_code, (
            f"{error.type}: {error.message} (the training script {how}){fix}\n\n"
            f"{error.traceback_tail}"
        )
    tail = "\n".join(result.stderr_tail.strip().splitlines()[-_TAIL_LINES:])
    return exit_code, f"the training script {how}" + (f"\n\nstderr tail:\n{tail}" if tail else "")


def _report(job: Job, report: _Report, metrics_dir: Path) -> None:
    records = summary_module.read_rank_records(metrics_dir) if metrics_dir.is_dir() else []
    for record in records:  # e.g. an inductor option this torch refused to apply
        report.warnings.extend(w for w in record.warnings if w not in report.warnings)
    summary = summary_module.build_summary(records, job=report.facts, warnings=report.warnings)
    try:
        summary_module.write_summary(job.paths.compiler / "summary.json", summary)
    except OSError as exc:
        print(f"[trcomp] could not write summary.json: {exc}", file=sys.stderr)
    for line in summary_module.metric_lines(summary):
        print(line)
    print(summary_module.render_block(summary), flush=True)


if __name__ == "__main__":
    os.environ.setdefault("SAGEMAKER_TRAINING_MODULE", "trcomp_container.training:main")
    from sagemaker_training import trainer

    trainer.train()
