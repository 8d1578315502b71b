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

torch is imported inside the functions, so importing this module is cheap.
"""

from __future__ import annotations

import functools
import json
import os
from collections.abc import Iterable, Iterator, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import torch

__all__ = [
    "backend",
    "compile",
    "compile_kwargs",
    "device",
    "is_enabled",
    "mark_step",
    "optimizer_step",
    "resolved_config",
    "save",
    "wrap_loader",
]

CONFIG_ENV = "TRCOMP_CONFIG"


@functools.lru_cache(maxsize=1)
def _config_from(text: str | None) -> Mapping[str, Any]:
    if not text:
        return {"enabled": False, "backend": None}
    try:
        body = json.loads(text)
    except json.JSONDecodeError as exc:
        raise ValueError(
            f"{CONFIG_ENV} is not valid JSON ({exc}); it is set by the trcomp container: "
            "unset it to run eager"
        ) from None
    return body if isinstance(body, dict) else {"enabled": False, "backend": None}


def resolved_config() -> Mapping[str, Any]:
    """The resolved config the container exported (``TRCOMP_CONFIG``); compiler off if unset."""
    return _config_from(os.environ.get(CONFIG_ENV))


def backend() -> str | None:
    """``"xla"``, ``"inductor"`` or None (eager)."""
    config = resolved_config()
    return config.get("backend") if config.get("enabled") else None


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

    if backend() == "xla":
        import torch_xla

        return torch_xla.device()
    if torch.cuda.is_available():
        local_rank = int(os.environ.get("LOCAL_RANK", "0"))
        torch.cuda.set_device(local_rank)
        return torch.device("cuda", local_rank)
    return torch.device("cpu")


def compile_kwargs(config: Mapping[str, Any], mode_options: Any = None) -> dict[str, Any]:
    """The ``torch.compile`` arguments for a resolved config (pure).

    torch.compile refuses ``mode`` and ``options`` together, so when the config
    has both, ``mode`` becomes the options it stands for
    (``torch._inductor.list_mode_options``; ``mode_options`` replaces it in tests)
    and the user's ``inductor_options`` are applied over them: reduce-overhead
    keeps its CUDA graphs, max-autotune its autotuning, unless an option says
    otherwise.
    """
    kwargs: dict[str, Any] = {"backend": "inductor"}
    mode = config.get("mode", "default")
    if mode != "default":
        kwargs["mode"] = mode
    if config.get("fullgraph"):
        kwargs["fullgraph"] = True
    if config.get("dynamic") is not None:
        kwargs["dynamic"] = config["dynamic"]
    if config.get("inductor_options"):
        options: dict[str, Any] = {}
        if "mode" in kwargs:
            if mode_options is None:
                from torch._inductor import list_mode_options as mode_options
            options.update(mode_options(kwargs.pop("mode"), kwargs.get("dynamic")))
        options.update(config["inductor_options"])
        kwargs["options"] = options
    return kwargs


def compile(model: torch.nn.Module) -> torch.nn.Module:
    """``torch.compile`` under inductor with the config's options; the model itself otherwise.

    Under xla the model is returned as is: torch-xla traces and compiles lazily.
    Only options that differ from torch.compile's defaults are passed; see
    :func:`compile_kwargs` for ``mode`` together with ``inductor_options``.
    """
    if backend() != "inductor":
        return model
    import torch

    kwargs = compile_kwargs(resolved_config())
    compiled: torch.nn.Module = torch.compile(model, **kwargs)  # type: ignore[assignment]
    return compiled


def optimizer_step(optimizer: torch.optim.Optimizer) -> Any:
    """``optimizer.step()``; under xla ``xm.optimizer_step`` (reduces gradients across replicas)."""
    if backend() == "xla":
        import torch_xla.core.xla_model as xm

        return xm.optimizer_step(optimizer)
    return optimizer.step()


def mark_step() -> None:
    """Cut and run the traced XLA graph (``torch_xla.sync()``); a no-op otherwise.

    Not needed when iterating a loader from :func:`wrap_loader`, which does it per batch.
    """
    if backend() == "xla":
        import torch_xla

        torch_xla.sync()


def wrap_loader(loader: Iterable[Any]) -> Iterable[Any]:
    """Yield ``loader``'s batches on :func:`device`.

    Under xla this is torch-xla's ``MpDeviceLoader``: it preloads batches onto the
    device and marks a step after each one.
    """
    if backend() == "xla":
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
    if backend() == "xla":
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
