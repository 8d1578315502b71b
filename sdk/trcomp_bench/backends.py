"""The one place the benchmark touches a compiler: environment, device, compile, step.

The parent process calls :func:`backend_env` (pure, no torch) to build the
environment of each measurement subprocess, including ``TRCOMP_CONFIG``, the
resolved config the container exports to a job; the subprocess calls
:func:`open_session` and drives its training loop through the returned
:class:`Session`, which goes through ``trcomp.runtime``: the benchmark
measures the same helpers a user's loop calls. Only this file knows how.
"""

from __future__ import annotations

import os
import resource
import sys
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

__all__ = [
    "BACKENDS",
    "BackendSpec",
    "Session",
    "backend_env",
    "get_backend",
    "open_session",
]


@dataclass(frozen=True)
class BackendSpec:
    """How one benchmark backend maps to a trcomp compiler config."""

    name: str
    compiler: str  # "eager" (compiler off), "inductor" or "xla"
    mode: str = "default"
    engine: str | None = None  # "jax": backend="xla" on the jax engine (torchax)
    regional: bool | None = None  # the config's regional (None: its default)


BACKENDS: dict[str, BackendSpec] = {
    b.name: b
    for b in (
        BackendSpec("eager", "eager"),
        BackendSpec("inductor", "inductor"),
        BackendSpec("inductor-max-autotune", "inductor", "max-autotune"),
        # The regional-compilation row set: repeated blocks compiled once, or the whole model.
        BackendSpec("inductor-regional", "inductor", regional=True),
        BackendSpec("inductor-whole", "inductor", regional=False),
        BackendSpec("xla", "xla"),
        BackendSpec("jax", "xla", engine="jax"),
    )
}


def get_backend(name: str) -> BackendSpec:
    """The backend called ``name``; the error lists the known names."""
    try:
        return BACKENDS[name]
    except KeyError:
        raise ValueError(f"unknown backend {name!r}: use one of {', '.join(BACKENDS)}") from None


def backend_env(name: str, cache_dir: Path, base: Mapping[str, str]) -> dict[str, str]:
    """The environment of a measurement subprocess for backend ``name``.

    ``cache_dir`` holds this backend's compile caches: a fresh directory gives a
    cold start, the same directory again a warm one. ``base`` is copied, not changed.
    """
    from trcomp.contract.runtime_config import RuntimeConfig
    from trcomp_container.backends import inductor, xla
    from trcomp_container.backends import jax as jax_engine

    spec = get_backend(name)
    env = dict(base)
    # The TRCOMP_CONFIG the container would export (see trcomp.runtime).
    config = RuntimeConfig()
    if spec.engine == "jax":
        config = RuntimeConfig(enabled=True, backend="xla", engine="jax")
        env.update(USE_TORCH_XLA="0", XLA_PYTHON_CLIENT_PREALLOCATE="false")
        env.pop("PJRT_DEVICE", None)
        env.update(jax_engine.cache_environment(cache_dir))
    elif spec.compiler == "xla":
        config = RuntimeConfig(enabled=True, backend="xla", engine="torch_xla")
        env["USE_TORCH_XLA"] = "1"
        env.setdefault("PJRT_DEVICE", "CPU")
        env.update(xla.cache_environment(cache_dir))  # the container's cache layout
    else:
        # With torch-xla installed, transformers would otherwise move models to XLA.
        env["USE_TORCH_XLA"] = "0"
        env.pop("PJRT_DEVICE", None)
        if spec.compiler == "inductor":
            config = RuntimeConfig.model_validate(
                {
                    "enabled": True,
                    "backend": "inductor",
                    "engine": "inductor",
                    "mode": spec.mode,
                    "regional": spec.regional,
                }
            )
        env.update(inductor.cache_environment(cache_dir))
    env.update(config.to_env())
    return env


@dataclass
class Session:
    """A backend opened inside a measurement subprocess, driven through ``trcomp.runtime``.

    The subprocess's ``TRCOMP_CONFIG`` (from :func:`backend_env`) tells the runtime
    helpers which compiler to use, exactly as the container does for a job.
    """

    spec: BackendSpec
    device: Any
    device_label: str

    def compile(self, model: Any) -> Any:
        """``model`` on this session's device, compiled for this backend (``runtime.compile``)."""
        from trcomp import runtime

        return runtime.compile(model.to(self.device))

    def optimizer(self, params: Any, lr: float) -> Any:
        """AdamW; fused on CUDA, the plain loop elsewhere (fused fails on XLA)."""
        import torch

        fused = self.device.type == "cuda"
        return torch.optim.AdamW(params, lr=lr, fused=fused or None, foreach=False)

    def compile_step(self, step: Any) -> Any:
        """``runtime.compile_step`` on the jax engine; the step itself elsewhere.

        Inductor's rows compile the model (:meth:`compile`) as they always have.
        """
        if self.spec.engine != "jax":
            return step
        from trcomp import runtime

        return runtime.compile_step(step)

    def optimizer_step(self, optimizer: Any) -> None:
        """``runtime.optimizer_step``: ``xm.optimizer_step`` under xla, else ``step()``."""
        from trcomp import runtime

        runtime.optimizer_step(optimizer)

    def to_device(self, batch: Any) -> Any:
        """``batch`` (tensor, tuple, list or dict of tensors) moved to this device.

        The same mover ``runtime.wrap_loader`` applies to every batch of a job.
        """
        from trcomp.runtime import _move

        return _move(batch, self.device)

    def mark_step(self) -> None:
        """End of a training step: run the XLA graph; on CUDA wait for the kernels."""
        from trcomp import runtime

        runtime.mark_step()
        if self.device.type == "cuda":
            import torch

            torch.cuda.synchronize()

    def peak_mem_mb(self) -> float:
        """Peak memory so far: CUDA max allocated on GPU, else peak process RSS."""
        if self.device.type == "cuda":
            import torch

            return float(torch.cuda.max_memory_allocated()) / 2**20
        # ru_maxrss is in KiB on Linux and in bytes on macOS.
        rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
        return rss / (2**20 if sys.platform == "darwin" else 2**10)


def open_session(name: str, device: str = "auto") -> Session:
    """Open backend ``name`` in this process; ``device`` is auto, cpu or cuda.

    Call it in a subprocess started with :func:`backend_env`'s environment.
    """
    spec = get_backend(name)
    from trcomp import runtime

    expected = None if spec.compiler == "eager" else spec.compiler
    if runtime.backend() != expected:
        raise RuntimeError(
            f"TRCOMP_CONFIG selects {runtime.backend() or 'eager'}, not {name}: "
            "start the measurement with backend_env()'s environment"
        )
    import torch

    cuda = torch.cuda.is_available() if device == "auto" else device == "cuda"
    if device == "cuda" and not torch.cuda.is_available():
        raise RuntimeError("--device cuda was asked for, but torch sees no CUDA device")
    if spec.engine == "jax":
        import jax

        if cuda and jax.default_backend() != "gpu":
            raise RuntimeError(
                f"JAX runs on {jax.default_backend()} on this GPU host: install trcomp's "
                "jax-cuda extra (jax-cuda12-plugin), or leave jax out of --backends"
            )
        return Session(spec, runtime.device(), f"jax:{jax.devices()[0].device_kind}")
    if spec.compiler == "xla":
        if cuda:
            raise RuntimeError(
                "torch-xla 2.9 cannot drive NVIDIA GPUs, so an xla row on this host would "
                "measure the CPU; leave xla out of --backends here (inductor is the GPU compiler)"
            )
        import torch_xla.core.xla_model as xm

        xla_device = runtime.device()
        return Session(spec, xla_device, f"xla:{xm.xla_device_hw(xla_device)}")
    if os.environ.get("USE_TORCH_XLA") == "1":
        raise RuntimeError("USE_TORCH_XLA=1 in a non-xla run: start it with backend_env()")
    if cuda:
        return Session(spec, runtime.device(), f"cuda:{torch.cuda.get_device_name()}")
    return Session(spec, torch.device("cpu"), f"cpu:{torch.get_num_threads()}t")
