"""Pick the concrete compiler for the devices present, before anything starts.

``auto`` means inductor (torch.compile) on NVIDIA GPUs, torch-xla on TPUs and
inductor on CPU, so a local run exercises the compiler the GPU job will use.
A backend that cannot drive the accelerators present is refused here, so a
job never trains on CPU while its GPUs sit idle.
"""

from __future__ import annotations

from trcomp.contract.config import TrainingCompilerConfig
from trcomp.contract.runtime_config import ConcreteBackend, Engine
from trcomp_container.devices import Devices
from trcomp_container.failures import ExitCode, JobFailed

__all__ = ["ConcreteBackend", "Engine", "resolve_backend", "resolve_engine"]


def resolve_backend(config: TrainingCompilerConfig, devices: Devices) -> ConcreteBackend | None:
    """The backend to run (``None``: compiler off), or :class:`JobFailed` if it cannot work."""
    if not config.enabled:
        return None
    if config.backend == "auto":
        return "xla" if devices.kind == "tpu" else "inductor"
    if config.backend == "inductor" and devices.kind == "tpu":
        raise JobFailed(
            f"backend='inductor' cannot drive the {devices} of this host: torch.compile "
            "has no TPU backend. Set backend='xla' or backend='auto'.",
            ExitCode.COMPILER_UNAVAILABLE,
        )
    return config.backend


def resolve_engine(
    config: TrainingCompilerConfig, backend: ConcreteBackend | None, devices: Devices
) -> Engine | None:
    """What runs the compiled code: inductor, torch-xla or JAX (``None``: eager)."""
    if backend is None:
        return None
    if backend == "inductor":
        return "inductor"
    return config.engine_for(nvidia_gpu=devices.kind == "gpu")
