"""torchax's environment for the jax engine, with trcomp's fixes for torchax 0.0.13's defects.

:mod:`trcomp.runtime.jax_engine` traces every step in the one environment
:func:`environment` enables for the whole process. torchax 0.0.13 has defects
this module works around; each has a test in tests/sdk/runtime/test_jax_engine.py
that fails without its workaround:

- ``model.to("jax")`` unties shared weights (GPT-2's head and embedding)
  unless torch swaps parameters in place on conversion;
- ``F.linear``, ``einsum``, ``__getitem__`` and other torch-function lowerings
  run above autograd, so ``loss.backward()`` finds no graph through them: they
  are dropped so that autograd sees their aten decomposition;
- the ``native_layer_norm_backward`` lowering takes fewer arguments than the
  aten op passes: torch's own decomposition replaces it;
- a float learning rate would be frozen into the program: it becomes a tensor,
  an input of the program;
- the optimizer's step counters must be tensors (``capturable``), not Python
  numbers read with ``.item()``;
- packages that call their own operators when imported (torchvision asks
  ``torchvision::_cuda_version`` for its CUDA build) fail to import once
  torchax's modes are on ("has no lowering"): transformers imports torchvision
  lazily, inside the first step, wherever it is installed (every SageMaker
  PyTorch image has it). They are imported before the modes go on;
- convolutions and pooling: ``Tensor.flatten`` cuts autograd, and the
  backward lowerings of convolution and pooling are missing or wrong
  (:mod:`trcomp.runtime.jax_conv`, pinned by tests/sdk/runtime/test_jax_conv.py).

Imports jax and torchax: only :mod:`trcomp.runtime.jax_engine` imports it.
"""

from __future__ import annotations

import functools
import importlib
import importlib.util
from collections.abc import Callable
from typing import Any

import torch
import torchax
from torch.utils import _pytree as torch_pytree
from torchax import tensor as tx_tensor

from trcomp.runtime import jax_conv

__all__ = [
    "DROPPED_LOWERINGS",
    "ENVIRONMENT_WORKAROUNDS",
    "IMPORTED_BEFORE_MODES",
    "OPTIMIZER_WORKAROUNDS",
    "device",
    "environment",
    "to_cpu",
]

DROPPED_LOWERINGS: tuple[Callable[..., Any], ...] = (
    torch.nn.functional.linear,
    torch.einsum,
    torch.Tensor.__getitem__,
    torch.nn.functional.scaled_dot_product_attention,
    torch.nn.functional.pad,
)
"""torch-function lowerings that bypass autograd in torchax 0.0.13 (see the module doc)."""


IMPORTED_BEFORE_MODES: tuple[str, ...] = ("torchvision",)
"""Installed packages that run their own operators at import: imported before torchax's modes."""


def _import_before_modes(env: tx_tensor.Environment) -> None:
    for name in IMPORTED_BEFORE_MODES:
        if importlib.util.find_spec(name) is not None:
            importlib.import_module(name)


def _keep_tied_weights(env: tx_tensor.Environment) -> None:
    # model.to("jax") swaps each Parameter's contents in place, so shared ones stay shared.
    torch.__future__.set_swap_module_params_on_conversion(True)


def _drop_lowerings_above_autograd(env: tx_tensor.Environment) -> None:
    for function in DROPPED_LOWERINGS:
        env._ops.pop(function, None)


def _fix_layer_norm_backward(env: tx_tensor.Environment) -> None:
    from torch._decomp import decompositions

    env.override_op_definition(
        torch.ops.aten.native_layer_norm_backward.default,
        decompositions.native_layer_norm_backward,
    )


def _tensor_lr(group: dict[str, Any]) -> None:
    # Only optimizers with capturable state (Adam, AdamW, ...) take a tensor LR;
    # SGD would read it with .item() inside the trace.
    if "capturable" in group and isinstance(group.get("lr"), float):
        with environment():
            group["lr"] = torch.tensor(group["lr"], dtype=torch.float32, device="jax")


def _capturable(group: dict[str, Any]) -> None:
    if "capturable" in group:
        group["capturable"] = True


ENVIRONMENT_WORKAROUNDS: dict[str, Callable[[tx_tensor.Environment], None]] = {
    "import_before_modes": _import_before_modes,
    "tied_weights": _keep_tied_weights,
    "lowerings_above_autograd": _drop_lowerings_above_autograd,
    "layer_norm_backward": _fix_layer_norm_backward,
    "flatten_method": jax_conv.keep_flatten_in_autograd,
    "convolution_backward": jax_conv.add_convolution_backward,
    "grouped_transposed_convolution": jax_conv.fix_grouped_transposed_convolution,
    "max_pool_lowering": jax_conv.keep_max_pool_in_autograd,
    "max_pool_backward": jax_conv.fix_max_pool_backward,
    "avg_pool_backward": jax_conv.fix_avg_pool_backward,
}
"""torchax defects fixed once per process (tests/sdk/runtime/test_jax_engine.py pins each)."""
OPTIMIZER_WORKAROUNDS: dict[str, Callable[[dict[str, Any]], None]] = {
    "tensor_lr": _tensor_lr,
    "capturable": _capturable,
}
"""torchax defects fixed per optimizer param group."""


@functools.lru_cache(maxsize=1)
def environment() -> tx_tensor.Environment:
    """torchax's environment with trcomp's workarounds, enabled for the whole process."""
    env = torchax.default_env()
    for workaround in ENVIRONMENT_WORKAROUNDS.values():
        workaround(env)
    env.enable_torch_modes()
    return env


def device() -> torch.device:
    """The JAX device as torch sees it (``jax:0``); moving a module there uses the engine."""
    environment()
    return torch.device("jax", 0)


def to_cpu(obj: Any) -> Any:
    """``obj`` with every torchax tensor copied to a CPU torch tensor (for ``torch.save``)."""
    env = environment()

    def move(value: Any) -> Any:
        if isinstance(value, tx_tensor.Tensor):
            return env.j2t_copy(value.jax()).requires_grad_(False)
        return value

    return torch_pytree.tree_map(move, obj)
