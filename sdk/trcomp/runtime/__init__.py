"""Small helpers that make a plain PyTorch loop use the job's compiler.

The container exports the resolved config as ``TRCOMP_CONFIG``; these helpers
read it. With the compiler off, or outside a job, they are the plain eager
equivalents, so one script runs on a laptop, in process mode and on SageMaker::

    from trcomp import runtime

    device = runtime.device()
    model = runtime.compile(Net().to(device))
    for x, y in runtime.wrap_loader(loader):
        loss = loss_fn(model(x), y)
        loss.backward()
        runtime.optimizer_step(optimizer)
        optimizer.zero_grad()
    runtime.save(model.state_dict(), "/opt/ml/model/model.pt")

torch is imported inside the functions, so importing this package is cheap:
it loads :mod:`trcomp.contract` and :mod:`trcomp.runtime.regions` only. Its
other modules run inside the user's process too, each loaded where it is needed:

- :mod:`~trcomp.runtime.regions`: regional compilation, shared with the start-up
  hook's zero-code path (standard library only at import);
- :mod:`~trcomp.runtime.jax_engine`: :func:`compile_step` on the jax engine
  (imports jax and torchax; loaded only on that engine), with torchax's
  environment and trcomp's fixes of :mod:`~trcomp.runtime.jax_env` and
  :mod:`~trcomp.runtime.jax_conv`, and the state paths of
  :mod:`~trcomp.runtime.jax_state`.
"""

from __future__ import annotations

import functools
import os
from collections.abc import Callable, Iterable, Iterator, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

from trcomp.contract.keys import CONFIG_ENV
from trcomp.contract.runtime_config import RuntimeConfig
from trcomp.runtime import regions

if TYPE_CHECKING:
    import torch

__all__ = [
    "backend",
    "compile",
    "compile_kwargs",
    "compile_step",
    "device",
    "engine",
    "is_enabled",
    "mark_step",
    "optimizer_step",
    "resolved_config",
    "save",
    "watch_compiles",
    "wrap_loader",
]

_watchers: list[Callable[[Any], None]] = []


@functools.lru_cache(maxsize=1)
def _config_from(text: str | None) -> RuntimeConfig:
    # Cached by the variable's value, so a script (or test) that changes
    # TRCOMP_CONFIG gets the new config, and an unchanged one is parsed once.
    return RuntimeConfig.from_env({} if text is None else {CONFIG_ENV: text})


def resolved_config() -> RuntimeConfig:
    """The resolved config the container exported (``TRCOMP_CONFIG``); compiler off if unset."""
    return _config_from(os.environ.get(CONFIG_ENV))


def backend() -> str | None:
    """``"xla"``, ``"inductor"`` or None (eager)."""
    config = resolved_config()
    return config.backend if config.enabled else None


def engine() -> str | None:
    """``"inductor"``, ``"torch_xla"``, ``"jax"`` or None (eager)."""
    name = backend()
    if name == "xla":
        return resolved_config().engine or "torch_xla"
    return name


def _jax() -> bool:
    return engine() == "jax"


def is_enabled() -> bool:
    """Whether this process runs with a compiler."""
    return backend() is not None


def device() -> torch.device:
    """The device to train on: the XLA device under xla, else this rank's GPU, else CPU.

    On GPUs it also makes this rank's GPU (``LOCAL_RANK``) the current CUDA
    device, so that tensors created without a device, NCCL and CUDA graphs use
    it instead of every rank piling onto GPU 0.
    """
    import torch

    if _jax():
        from trcomp.runtime import jax_engine

        return jax_engine.device()
    if backend() == "xla":
        import torch_xla

        # XLA and CPU tensors cannot share a shallow copy, so Module.to() would give each
        # module its own new Parameter and untie shared weights (GPT-2's head and
        # embedding); swapping the tensors in place keeps them one Parameter.
        torch.__future__.set_swap_module_params_on_conversion(True)
        return torch_xla.device()
    if torch.cuda.is_available():
        local_rank = int(os.environ.get("LOCAL_RANK", "0"))
        torch.cuda.set_device(local_rank)
        return torch.device("cuda", local_rank)
    return torch.device("cpu")


def compile_kwargs(config: RuntimeConfig | Mapping[str, Any]) -> dict[str, Any]:
    """The ``torch.compile`` arguments for a resolved config (pure).

    Only what differs from torch.compile's defaults: ``mode``, ``fullgraph``,
    ``dynamic``. ``inductor_options`` are not among them: the job's start-up
    hook applies them once, globally, to ``torch._inductor.config`` in every
    process, so a ``runtime.compile`` script and an HF Trainer script (which
    passes ``mode`` alone) compile with the same settings. Where ``mode`` sets
    an option too, the mode's value holds for that compile, as in torch.compile.
    """
    if not isinstance(config, RuntimeConfig):
        config = RuntimeConfig.model_validate(dict(config))
    return config.compile_kwargs()


def compile(model: torch.nn.Module) -> torch.nn.Module:
    """``torch.compile`` under inductor with the config's options; the model itself otherwise.

    Regional compilation (only with ``regional=True``): a model with repeated
    blocks (the children of an ``nn.ModuleList``/``nn.Sequential`` that share one
    class, as in every transformer) has them marked as one nested compile region
    before ``torch.compile(model)``, so inductor compiles one block for all layers;
    blocks with frozen parameters, buffers or activation checkpointing are not
    marked (:mod:`trcomp.runtime.regions`).
    Under xla the model is returned as is: torch-xla traces and compiles lazily.
    Only options that differ from torch.compile's defaults are passed; see
    :func:`compile_kwargs` for how ``inductor_options`` apply.
    """
    if backend() != "inductor":
        return model
    config = resolved_config()
    if config.compiles_regionally:
        import torch

        compiled: torch.nn.Module = regions.compile_wrapped(model, torch, compile_kwargs(config))
    else:
        compiled = _torch_compile(model)
    for watcher in list(_watchers):
        watcher(compiled)
    return compiled


def watch_compiles(watcher: Callable[[Any], None]) -> Callable[[], None]:
    """Call ``watcher`` with each module :func:`compile` returns; returns its undo.

    For the job's start-up hook, which checks such a module against eager on its
    first compiled step (``verify``; docs/runtime.md) as it does the modules it
    compiles itself. The watcher must not raise.
    """
    _watchers.append(watcher)
    return lambda: _watchers.remove(watcher) if watcher in _watchers else None


def compile_step(fn: Callable[..., Any]) -> Callable[..., Any]:
    """Compile one training step: ``fn`` runs forward, ``loss.backward()``, the optimizer.

    On the jax engine ``fn`` runs as one XLA program (see :mod:`trcomp.runtime.jax_engine`);
    under inductor it is ``torch.compile``-d with the config's options; with the
    compiler off, under torch-xla, or outside a job it is ``fn`` itself.
    """
    if _jax():
        from trcomp.runtime import jax_engine

        return jax_engine.compile_step(fn)
    if backend() != "inductor":
        return fn
    compiled: Callable[..., Any] = _torch_compile(fn)
    return compiled


def _torch_compile(target: Any) -> Any:
    import torch

    kwargs = compile_kwargs(resolved_config())
    return torch.compile(target, **kwargs)


def optimizer_step(optimizer: torch.optim.Optimizer) -> Any:
    """``optimizer.step()``; under xla ``xm.optimizer_step`` (reduces gradients across replicas)."""
    if backend() == "xla" and not _jax():
        import torch_xla.core.xla_model as xm

        return xm.optimizer_step(optimizer)
    return optimizer.step()


def mark_step() -> None:
    """Cut and run the traced XLA graph (``torch_xla.sync()``); a no-op otherwise.

    Not needed when iterating a loader from :func:`wrap_loader`, which does it per batch.
    """
    if backend() == "xla" and not _jax():
        import torch_xla

        torch_xla.sync()


def wrap_loader(loader: Iterable[Any]) -> Iterable[Any]:
    """Yield ``loader``'s batches on :func:`device`.

    Under xla this is torch-xla's ``MpDeviceLoader``: it preloads batches onto the
    device and marks a step after each one.
    """
    if backend() == "xla" and not _jax():
        import torch_xla.distributed.parallel_loader as pl

        return pl.MpDeviceLoader(loader, device())
    return _to_device(loader, device())


def _to_device(loader: Iterable[Any], target: torch.device) -> Iterator[Any]:
    for batch in loader:
        yield _move(batch, target)


def _move(batch: Any, target: torch.device) -> Any:
    if hasattr(batch, "to"):
        return batch.to(target)
    if isinstance(batch, Mapping):
        return type(batch)({key: _move(value, target) for key, value in batch.items()})  # type: ignore[call-arg]
    if isinstance(batch, tuple) and hasattr(batch, "_fields"):  # a namedtuple
        return type(batch)(*(_move(value, target) for value in batch))
    if isinstance(batch, tuple | list):
        return type(batch)(_move(value, target) for value in batch)
    return batch


def save(obj: Any, path: str | os.PathLike[str]) -> None:
    """Save ``obj`` once per job (rank 0), from CPU, creating the directory.

    Under xla this is ``xm.save``, which moves tensors off the device first.
    """
    target = Path(path)
    if _jax():
        from trcomp.runtime import jax_engine

        obj = jax_engine.to_cpu(obj)
    elif backend() == "xla":
        import torch_xla.core.xla_model as xm

        if xm.is_master_ordinal(local=False):
            target.parent.mkdir(parents=True, exist_ok=True)
        xm.save(obj, str(target))
        return
    if int(os.environ.get("RANK", "0")) != 0:
        return
    import torch

    target.parent.mkdir(parents=True, exist_ok=True)
    torch.save(obj, str(target))
