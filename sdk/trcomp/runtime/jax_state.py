"""The training state a compiled step reads and writes, by stable paths (jax engine).

:mod:`trcomp.runtime.jax_engine` traces a step with this state as the program's
inputs and outputs. Parameters, buffers, gradients, the optimizers' param-group
tensors (learning rates) and per-parameter state are each named by a path such
as ``("grad", 3)`` or ``("opt", 0, 3, "exp_avg")``, read in one order, and
written back into the same torch objects the script holds.
"""

from __future__ import annotations

import dataclasses
import inspect
from collections.abc import Callable, Iterator
from typing import Any

import jax
import torch
from torchax import tensor as tx_tensor

__all__ = ["Parts", "Slots", "elem", "find_parts", "write_state"]


@dataclasses.dataclass
class Parts:
    """The modules, optimizers and schedulers a step function uses."""

    modules: list[torch.nn.Module]
    optimizers: list[torch.optim.Optimizer]
    schedulers: list[Any]


def _referenced(fn: Callable[..., Any]) -> Iterator[Any]:
    closure = inspect.getclosurevars(fn)
    yield from closure.nonlocals.values()
    yield from closure.globals.values()


def find_parts(fn: Callable[..., Any]) -> Parts:
    """The modules, optimizers and LR schedulers ``fn`` names (its globals and closure)."""
    parts = Parts([], [], [])
    for value in _referenced(fn):
        if isinstance(value, torch.nn.Module):
            parts.modules.append(value)
        elif isinstance(value, torch.optim.Optimizer):
            parts.optimizers.append(value)
        elif isinstance(value, torch.optim.lr_scheduler.LRScheduler):
            parts.schedulers.append(value)
    return parts


class Slots:
    """Every tensor of the training state, by a stable path, read and written in one order."""

    def __init__(self, parts: Parts) -> None:
        self.parts = parts
        self.params: list[torch.Tensor] = []
        seen: set[int] = set()
        for module in parts.modules:
            for tensor in [*module.parameters(), *module.buffers()]:
                if id(tensor) not in seen:
                    seen.add(id(tensor))
                    self.params.append(tensor)
        for optimizer in parts.optimizers:
            for group in optimizer.param_groups:
                for param in group["params"]:
                    if id(param) not in seen:
                        seen.add(id(param))
                        self.params.append(param)

    def read(self) -> tuple[list[tuple[Any, ...]], list[torch.Tensor]]:
        """(paths, tensors) of the state as it is now."""
        paths: list[tuple[Any, ...]] = []
        tensors: list[torch.Tensor] = []
        for index, param in enumerate(self.params):
            paths.append(("param", index))
            tensors.append(param)
            if param.grad is not None:
                paths.append(("grad", index))
                tensors.append(param.grad)
        for o, optimizer in enumerate(self.parts.optimizers):
            for g, group in enumerate(optimizer.param_groups):
                for key, value in sorted(group.items()):
                    if isinstance(value, torch.Tensor):
                        paths.append(("group", o, g, key))
                        tensors.append(value)
            for index, param in enumerate(self.params):
                state = optimizer.state.get(param)
                for key, value in sorted((state or {}).items()):
                    if isinstance(value, torch.Tensor):
                        paths.append(("opt", o, index, key))
                        tensors.append(value)
        return paths, tensors


def elem(value: torch.Tensor) -> jax.Array:
    if not isinstance(value, tx_tensor.Tensor):
        raise TypeError(
            f"compile_step found a {value.device} tensor of shape {tuple(value.shape)} in the "
            "training state; the jax engine needs it on runtime.device(): move the model "
            "with model.to(runtime.device()) before building the optimizer"
        )
    return value.jax()


def _write(
    env: tx_tensor.Environment,
    parts: Parts,
    params: list[torch.Tensor],
    path: tuple[Any, ...],
    value: Any,
) -> None:
    """Put ``value`` (a JAX array, or None to clear) at ``path`` of the live training state."""
    kind = path[0]
    if kind == "param":
        params[path[1]]._elem = value  # type: ignore[attr-defined]
    elif kind == "grad":
        param = params[path[1]]
        if value is None:
            param.grad = None
        elif isinstance(param.grad, tx_tensor.Tensor):
            param.grad._elem = value
        else:
            param.grad = tx_tensor.Tensor(value, env)
    elif kind == "group":
        _, o, g, key = path
        parts.optimizers[o].param_groups[g][key]._elem = value
    else:  # "opt"
        _, o, index, key = path
        state = parts.optimizers[o].state[params[index]]
        if value is None:
            state.pop(key, None)
        elif isinstance(state.get(key), tx_tensor.Tensor):
            state[key]._elem = value
        else:
            state[key] = tx_tensor.Tensor(value, env)


def write_state(
    env: tx_tensor.Environment, slots: Slots, paths: list[tuple[Any, ...]], arrays: list[Any]
) -> None:
    """Make the live state exactly ``paths`` -> ``arrays`` (clearing grads and state not in it)."""
    current, _ = slots.read()
    for path in set(current) - set(paths):
        if path[0] in ("grad", "opt"):
            _write(env, slots.parts, slots.params, path, None)
    for path, array in zip(paths, arrays, strict=True):
        _write(env, slots.parts, slots.params, path, array)
