"""Checks of a compiler config against the job it is given to.

They run in the estimator's (or v3 ModelTrainer's) constructor, before anything
is uploaded. They only read a :class:`~trcomp.jobspec.JobSpec`: no network, no
AWS calls.
"""

from __future__ import annotations

import logging
from typing import Any

from trcomp.caller import warn_at_caller
from trcomp.contract.config import TrainingCompilerConfig
from trcomp.contract.distribution import (
    ACCEPTED_DISTRIBUTIONS,
    PROCESS_PER_DEVICE,
    REFUSED_DISTRIBUTIONS,
    enabled_distributions,
)
from trcomp.contract.errors import CompilerConfigWarning, SharedCacheError, UnsupportedJobError
from trcomp.contract.instances import (
    DOCKER_LOCAL_MODES,
    MIN_COMPUTE_CAPABILITY,
    PROCESS_MODE,
    describe_instance,
    supported_gpu_families,
)
from trcomp.contract.shared_cache import (
    KEY_ENV,
    KEY_SECRET_ENV,
    REDIS_PASSWORD_ENV,
    REDIS_PASSWORD_SECRET_ENV,
    parse_location,
)
from trcomp.image.uris import default_image, image_for
from trcomp.jobspec import JobSpec

__all__ = ["validate_job"]

logger = logging.getLogger("trcomp")


def _warn(message: str, issued: list[str]) -> None:
    warn_at_caller(message, CompilerConfigWarning)
    logger.warning(message)
    issued.append(message)


def validate_job(config: TrainingCompilerConfig, spec: JobSpec) -> list[str]:
    """Raise :class:`UnsupportedJobError` for what cannot work; warn for what may disappoint."""
    issued: list[str] = []
    if not config.enabled:
        return issued
    _check_framework_version(config, spec)
    types = spec.instance_types
    if len(set(types)) > 1:
        raise UnsupportedJobError(
            f"heterogeneous instance_groups ({', '.join(sorted(set(types)))}) are not supported "
            "with the training compiler: use one instance type for the whole job"
        )
    info = describe_instance(types[0]) if types and isinstance(types[0], str) else None
    if types and info is None:  # a SageMaker Pipelines variable, known only when it runs
        _warn(
            f"instance_type is a pipeline variable ({type(types[0]).__name__}), so trcomp "
            "cannot check it now: give it an NVIDIA GPU instance of compute capability 7.0+ "
            f"({', '.join(supported_gpu_families())} families) when the pipeline runs.",
            issued,
        )
    if info is not None:
        _check_instance(config, spec, info, issued)
    _check_distribution(config, spec.distribution)
    _check_observers(spec, issued)
    _check_shared_cache(config, spec, issued)
    return issued


def _check_framework_version(config: TrainingCompilerConfig, spec: JobSpec) -> None:
    """Refuse ``backend='xla'`` on a torch version whose image has neither XLA engine.

    Process mode counts as trcomp's image: it runs on a local torch of that version,
    for which no torch-xla or torchax exists either.
    """
    version = spec.framework_version
    image = image_for(version) if version is None or isinstance(version, str) else None
    if image is None or image.runs_xla or config.backend != "xla":
        return
    if not spec.image_is_default and spec.instance_type != PROCESS_MODE:
        return  # the user's image: what it holds is the user's business
    xla = default_image()
    argument = "pytorch_version" if spec.hf_trainer else "framework_version"
    raise UnsupportedJobError(
        f"backend='xla' with {argument}={version!r}: trcomp's torch {image.torch} image runs "
        f"inductor only (torch-xla has no release after {xla.short} and torchax does not "
        f"import on torch {image.short}), so the job could not compile. Pass "
        f"{argument}={xla.short!r} to keep XLA, or backend='inductor' (or 'auto', which is "
        f"inductor on GPUs) to stay on torch {image.short}."
    )


def _check_instance(
    config: TrainingCompilerConfig, spec: JobSpec, info: Any, issued: list[str]
) -> None:
    if info.kind == "neuron":
        raise UnsupportedJobError(
            f"{info.instance_type} is an AWS Trainium/Inferentia instance, which has its own "
            "compiler (the Neuron SDK); trcomp compiles for NVIDIA GPUs: choose a GPU instance "
            "such as ml.g5.2xlarge, or drop compiler_config and use the Neuron containers"
        )
    if info.kind == "unusable_gpu":
        raise UnsupportedJobError(_unusable_gpu_reason(info))
    if info.kind == "cpu":
        _warn(
            f"{info.instance_type} is a CPU instance: compilers rarely speed up CPU training. "
            "The job will run, compiled; use it to find graph breaks, not for speed.",
            issued,
        )
    elif info.kind == "unknown":
        _warn(
            f"trcomp does not know the instance family {info.family!r} ({info.instance_type}); "
            "the job will run as on an NVIDIA GPU instance. If the family is new, add it to "
            "trcomp.contract.instances.FAMILIES.",
            issued,
        )
    if config.backend == "xla" and config.engine_for(nvidia_gpu=info.has_nvidia_gpu) == "jax":
        _check_jax_engine(spec, info, issued)
    elif config.backend == "xla" and info.has_nvidia_gpu:
        if spec.image_is_default:
            raise UnsupportedJobError(
                f"backend='xla' cannot use the GPUs of {info.instance_type} with the default "
                "trcomp image: torch-xla 2.9 has no CUDA support (it was removed in 2.9). Set "
                "backend='inductor' (or 'auto'), or pass image_uri= an image with a "
                "CUDA-enabled torch-xla build."
            )
        _warn(
            f"backend='xla' on {info.instance_type} with image {spec.image_uri}: this only "
            "works if that image has a CUDA-enabled torch-xla; otherwise the job fails at start.",
            issued,
        )


def _unusable_gpu_reason(info: Any) -> str:
    gpu = info.gpu
    if gpu is not None and gpu.vendor == "amd":
        why = (
            f"has AMD {gpu.model} GPUs; trcomp's image has torch 2.9's CUDA build, which "
            "only drives NVIDIA GPUs"
        )
    else:
        model = f"NVIDIA {gpu.model}" if gpu is not None else "NVIDIA"
        cc = ".".join(map(str, gpu.compute_capability)) if gpu and gpu.compute_capability else "?"
        need = ".".join(map(str, MIN_COMPUTE_CAPABILITY))
        why = (
            f"has {model} GPUs (compute capability {cc}); torch 2.9's CUDA build and triton, "
            f"which inductor compiles with, need compute capability {need} or newer"
        )
    return (
        f"{info.instance_type} {why}, so the compiled job cannot run there. Choose an NVIDIA "
        "instance of compute capability 7.0+ such as ml.g4dn.xlarge or ml.g5.2xlarge."
    )


JAX_ENGINE_WARNING = (
    "backend='xla' runs on the jax engine (torchax on JAX), which is experimental: plain "
    "PyTorch loops whose step goes through trcomp.runtime.compile_step compile into one XLA "
    "program; other code runs op by op, slowly. One process drives the host's devices. "
    "See docs/xla-gpu.md."
)


def _check_jax_engine(spec: JobSpec, info: Any, issued: list[str]) -> None:
    where = f"on {info.instance_type}"
    if spec.hf_trainer:
        raise UnsupportedJobError(
            f"trcomp.HuggingFace with backend='xla' {where} runs the jax engine, which cannot "
            "compile an unmodified HF Trainer script: Trainer's step is not a function "
            "compile_step can trace. Use backend='inductor' (or 'auto') for HF Trainer scripts."
        )
    for name in enabled_distributions(spec.distribution):
        if name in PROCESS_PER_DEVICE:
            raise UnsupportedJobError(
                f"distribution {name!r} starts one process per device, but the jax engine of "
                f"backend='xla' ({where}) drives all devices of a host from one process: drop "
                "distribution=, or use backend='inductor' with torch_distributed"
            )
    if spec.instance_count > 1:
        raise UnsupportedJobError(
            f"the jax engine of backend='xla' runs on one host; instance_count="
            f"{spec.instance_count} asks for several (multi-host JAX is not supported "
            "yet): use instance_count=1, or backend='inductor' with torch_distributed"
        )
    _warn(JAX_ENGINE_WARNING, issued)


def _check_distribution(config: TrainingCompilerConfig, distribution: Any) -> None:
    for name in enabled_distributions(distribution):
        if name in REFUSED_DISTRIBUTIONS:
            raise UnsupportedJobError(
                f"distribution {name!r} is not supported with the training compiler: "
                f"{REFUSED_DISTRIBUTIONS[name]}"
            )
        if name not in ACCEPTED_DISTRIBUTIONS:
            raise UnsupportedJobError(
                f"distribution {name!r} is not supported with the training compiler; it "
                f"accepts {', '.join(ACCEPTED_DISTRIBUTIONS)}: use one of those"
            )
        if name == "pytorchxla" and config.backend != "xla":
            raise UnsupportedJobError(
                f"distribution 'pytorchxla' runs torch-xla workers, but the compiler backend is "
                f"{config.backend!r}: set TrainingCompilerConfig(backend='xla'), or use "
                "distribution={'torch_distributed': {'enabled': True}} with inductor"
            )


def _check_shared_cache(config: TrainingCompilerConfig, spec: JobSpec, issued: list[str]) -> None:
    if not config.shared_cache or spec.instance_type in (PROCESS_MODE, *DOCKER_LOCAL_MODES):
        return
    location = parse_location(config.shared_cache)
    environment = spec.environment or {}
    if location.kind != "redis":
        if KEY_SECRET_ENV not in environment and KEY_ENV not in environment:
            _warn(
                f"shared_cache {location.shown} has no signing key: its entries are trusted "
                "because of where they are, so any principal that may write there (a role "
                "shared by several teams) can put code there that this job runs. Store a key in "
                f"AWS Secrets Manager and pass its ARN as environment={{'{KEY_SECRET_ENV}': ...}} "
                "(docs/remote.md).",
                issued,
            )
        return
    has_password = REDIS_PASSWORD_SECRET_ENV in environment or REDIS_PASSWORD_ENV in environment
    missing = [
        what
        for what, absent in (("TLS (rediss://)", not location.tls), ("password", not has_password))
        if absent
    ]
    if not missing:
        return
    if config.shared_cache_insecure:
        _warn(
            f"shared_cache {location.shown} has no {' and no '.join(missing)} "
            "(shared_cache_insecure=True): keep that Redis on a network only your jobs reach.",
            issued,
        )
        return
    raise SharedCacheError(
        f"shared_cache {location.shown} has no {' and no '.join(missing)}: a compile cache is "
        "code, and anyone who reaches that Redis could put code there that every job reading "
        f"it runs. Use rediss://host:port and pass the password as a Secrets Manager secret "
        f"ARN in environment={{'{REDIS_PASSWORD_SECRET_ENV}': ...}}; or, for a Redis on a "
        "network only your jobs reach, set TrainingCompilerConfig(shared_cache_insecure=True) "
        "(docs/remote.md)."
    )


def _check_observers(spec: JobSpec, issued: list[str]) -> None:
    if spec.debugger_on:
        _warn(
            "SageMaker Debugger is on: its hooks read tensors every step, which makes the "
            "compiler recompile or break graphs. Pass debugger_hook_config=False.",
            issued,
        )
    if spec.profiler_on:
        _warn(
            "SageMaker Profiler is on: framework profiling adds hooks that make the compiler "
            "recompile. Pass disable_profiler=True.",
            issued,
        )
