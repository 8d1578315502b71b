"""The jax engine of ``backend="xla"``: a training step traced by torchax into one XLA program.

:func:`compile_step` takes the user's unchanged step (``zero_grad``, forward,
``loss.backward()``, ``optimizer.step()``, ``scheduler.step()``) and runs it as
one ``jax.jit`` program. The training state (parameters, buffers, gradients,
optimizer state, learning rates and the random key) goes in and comes out as
JAX arrays (:mod:`trcomp.runtime.jax_state` names it); between steps it lives
in the same torch objects the script holds, so ``model.state_dict()`` and
``optimizer.state_dict()`` stay valid.

The step runs in torchax's environment with trcomp's fixes for torchax
0.0.13's defects (:mod:`trcomp.runtime.jax_env`, whose names this module
re-exports: :data:`ENVIRONMENT_WORKAROUNDS`, :func:`device`, ...); each has a
test in tests/sdk/runtime/test_jax_engine.py that fails without its workaround.
:data:`STATS` counts what the compiled steps did, for the job's summary (the
start-up hook reads it from this module at exit).

Only :mod:`trcomp.runtime` imports this module, and only on the jax engine.
"""

from __future__ import annotations

import dataclasses
import functools
from collections.abc import Callable
from typing import Any

import jax
import torch
from torch.utils import _pytree as torch_pytree
from torchax import tensor as tx_tensor

from trcomp.runtime.jax_env import (
    DROPPED_LOWERINGS,
    ENVIRONMENT_WORKAROUNDS,
    OPTIMIZER_WORKAROUNDS,
    device,
    environment,
    to_cpu,
)
from trcomp.runtime.jax_state import Parts, Slots, elem, find_parts, write_state

__all__ = [
    "DROPPED_LOWERINGS",
    "ENVIRONMENT_WORKAROUNDS",
    "OPTIMIZER_WORKAROUNDS",
    "STATS",
    "StepStats",
    "compile_step",
    "device",
    "environment",
    "to_cpu",
]


@dataclasses.dataclass
class StepStats:
    """What the compiled steps of this process did, for the job's summary.

    ``cache_hits`` and ``cache_misses`` count every program JAX looked up in its
    persistent cache (torchax's op-by-op work outside the step included);
    ``programs_from_cache`` counts the step programs that came from it.
    ``devices`` is the size of the data-parallel mesh, ``split_inputs`` how many
    of the last program's batch inputs were split across it.
    """

    programs_compiled: int = 0
    compile_time_s: float = 0.0
    calls: int = 0
    recompiles_after_warmup: int = 0
    programs_from_cache: int = 0
    devices: int = 1
    split_inputs: int = 0
    cache_hits: int = 0
    cache_misses: int = 0

    def as_dict(self) -> dict[str, Any]:
        """The numbers as JSON-ready values (the metrics hook writes them per process)."""
        body = dataclasses.asdict(self)
        body["compile_time_s"] = round(self.compile_time_s, 4)
        return body


STATS = StepStats()
_CACHE_EVENTS = {
    "/jax/compilation_cache/cache_hits": "cache_hits",
    "/jax/compilation_cache/cache_misses": "cache_misses",
}


def _on_jax_event(event: str, **kwargs: Any) -> None:
    name = _CACHE_EVENTS.get(event)
    if name is not None:
        setattr(STATS, name, getattr(STATS, name) + 1)


jax.monitoring.register_event_listener(_on_jax_event)


# -- the traced step ------------------------------------------------------------------


def prepare_optimizer(optimizer: torch.optim.Optimizer) -> None:
    """Tensor learning rates and capturable state, so the program reads both as inputs."""
    for group in optimizer.param_groups:
        if "foreach" in group and group["foreach"] is None:
            # One op per tensor traces into the same program as foreach ops, with less code.
            group["foreach"] = False
        for workaround in OPTIMIZER_WORKAROUNDS.values():
            workaround(group)
    for state in optimizer.state.values():
        step = state.get("step")
        if isinstance(step, torch.Tensor) and not isinstance(step, tx_tensor.Tensor):
            state["step"] = step.to("jax")


@dataclasses.dataclass
class _Program:
    """One compiled XLA program for one state layout and argument signature."""

    executable: Any = None
    out_paths: list[tuple[Any, ...]] = dataclasses.field(default_factory=list)
    out_tree: Any = None
    scheduler_steps: int = 0


class CompiledStep:
    """A step function run as one XLA program per state layout and input signature."""

    def __init__(self, fn: Callable[..., Any], parts: Parts) -> None:
        functools.update_wrapper(self, fn)
        self.fn = fn
        self.parts = parts
        self.slots = Slots(parts)
        self.programs: dict[Any, _Program] = {}
        self.calls = 0
        for optimizer in parts.optimizers:
            prepare_optimizer(optimizer)
        for scheduler in parts.schedulers:
            groups = scheduler.optimizer.param_groups
            if any(isinstance(group.get("lr"), float) for group in groups):
                raise TypeError(
                    f"compile_step cannot follow {type(scheduler).__name__}'s learning rate "
                    f"for {type(scheduler.optimizer).__name__}: that optimizer reads a float "
                    "learning rate, which the compiled program would freeze at its first "
                    "value. Use an optimizer with capturable state (Adam, AdamW) or no LR "
                    "scheduler inside the step."
                )

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        env = environment()
        self.calls += 1
        STATS.calls += 1
        in_paths, in_tensors = self.slots.read()
        state = [elem(t) for t in in_tensors]
        leaves, spec = torch_pytree.tree_flatten((args, kwargs))
        tensor_at = [isinstance(leaf, torch.Tensor) for leaf in leaves]
        arg_arrays = [elem(leaf) for leaf, is_t in zip(leaves, tensor_at, strict=True) if is_t]
        statics = tuple(
            None if is_t else leaf for leaf, is_t in zip(leaves, tensor_at, strict=True)
        )
        signature = tuple((a.shape, str(a.dtype)) for a in [*state, *arg_arrays])
        key = (tuple(in_paths), str(spec), statics, signature)
        program = self.programs.get(key)
        if program is None:
            program = self._compile(key, in_paths, spec, statics, tensor_at, state, arg_arrays)
        out_arrays, new_state, new_key = program.executable(state, arg_arrays, env.param.prng)
        write_state(env, self.slots, program.out_paths, new_state)
        env._property.content = tx_tensor.RuntimeProperty.override(env.param, prng=new_key)
        for _ in range(program.scheduler_steps):
            for scheduler in self.parts.schedulers:
                scheduler.step()
        from torch.optim.optimizer import _global_optimizer_post_hooks

        for optimizer in self.parts.optimizers:
            for hook in list(_global_optimizer_post_hooks.values()):
                hook(optimizer, (), {})
        return torch_pytree.tree_unflatten(
            [tx_tensor.Tensor(a, env) if isinstance(a, jax.Array) else a for a in out_arrays],
            program.out_tree,
        )

    def _compile(
        self,
        key: Any,
        in_paths: list[tuple[Any, ...]],
        spec: Any,
        statics: tuple[Any, ...],
        tensor_at: list[bool],
        state: list[Any],
        arg_arrays: list[Any],
    ) -> _Program:
        import time

        env = environment()
        program = _Program()

        def traced(state: list[Any], arg_arrays: list[Any], prng: Any) -> Any:
            write_state(env, self.slots, in_paths, state)
            arrays = iter(arg_arrays)
            leaves = [
                tx_tensor.Tensor(next(arrays), env) if is_t else static
                for static, is_t in zip(statics, tensor_at, strict=True)
            ]
            args, kwargs = torch_pytree.tree_unflatten(leaves, spec)
            steps = _SchedulerCalls(self.parts.schedulers)
            with env.override_property(prng=prng), steps, _no_step_hooks():
                result = self.fn(*args, **kwargs)
                new_key = env.param.prng
            program.scheduler_steps = steps.count
            out_paths, out_tensors = self.slots.read()
            program.out_paths = out_paths
            out_leaves, program.out_tree = torch_pytree.tree_flatten(result)
            outs = [elem(v) if isinstance(v, torch.Tensor) else v for v in out_leaves]
            return outs, [elem(t) for t in out_tensors], new_key

        started = time.perf_counter()
        originals = list(state)
        try:
            lowered = _jit(traced, len(state), arg_arrays).lower(state, arg_arrays, env.param.prng)
        finally:
            # Tracing left tracers in the live objects: put the concrete state back.
            write_state(env, self.slots, in_paths, originals)
        hits = STATS.cache_hits
        program.executable = lowered.compile()
        if STATS.cache_hits > hits:  # read from JAX's persistent cache, not compiled
            STATS.programs_from_cache += 1
        STATS.compile_time_s += time.perf_counter() - started
        STATS.programs_compiled += 1
        if self.calls > _WARMUP_CALLS:
            STATS.recompiles_after_warmup += 1
        self.programs[key] = program
        return program


@functools.lru_cache(maxsize=1)
def data_mesh() -> Any:
    """A one-axis mesh over every device JAX sees (a host's GPUs), or None for one device."""
    devices = jax.devices()
    if len(devices) < 2:
        return None
    import numpy as np
    from jax.sharding import Mesh

    return Mesh(np.array(devices), ("data",))


def _jit(traced: Callable[..., Any], n_state: int, arg_arrays: list[Any]) -> Any:
    """``jax.jit``; on several devices, data parallel: batches split on dim 0, state replicated.

    The program still computes the whole batch's loss and gradients (XLA's SPMD
    partitioner inserts the reductions), so it matches a one-device run. An input
    whose first dimension does not divide by the device count is replicated.
    """
    mesh = data_mesh()
    STATS.devices = 1 if mesh is None else mesh.size
    if mesh is None:
        return jax.jit(traced)
    from jax.sharding import NamedSharding
    from jax.sharding import PartitionSpec as P

    replicated, split = NamedSharding(mesh, P()), NamedSharding(mesh, P("data"))
    args = [split if a.ndim and a.shape[0] % mesh.size == 0 else replicated for a in arg_arrays]
    STATS.split_inputs = sum(sharding is split for sharding in args)
    return jax.jit(traced, in_shardings=([replicated] * n_state, args, replicated))


# Step 1 compiles the program that creates the gradients and the optimizer state;
# step 2 the steady one, which reads them. A program compiled later is a recompile.
_WARMUP_CALLS = 2


class _SchedulerCalls:
    """Counts ``scheduler.step()`` calls made while tracing; they run after each program."""

    def __init__(self, schedulers: list[Any]) -> None:
        self.schedulers = schedulers
        self.count = 0

    def _step(self, *args: Any, **kwargs: Any) -> None:
        self.count += 1

    def __enter__(self) -> _SchedulerCalls:
        for scheduler in self.schedulers:
            scheduler.step = self._step
        return self

    def __exit__(self, *exc: object) -> None:
        for scheduler in self.schedulers:
            del scheduler.step
        # several schedulers step once each per step
        if self.schedulers:
            self.count //= len(self.schedulers)


class _no_step_hooks:
    """Silence global optimizer hooks while tracing; they fire after each program instead."""

    def __enter__(self) -> None:
        from torch.optim import optimizer

        self.saved = dict(optimizer._global_optimizer_post_hooks)
        optimizer._global_optimizer_post_hooks.clear()

    def __exit__(self, *exc: object) -> None:
        from torch.optim import optimizer

        optimizer._global_optimizer_post_hooks.update(self.saved)


def compile_step(fn: Callable[..., Any]) -> CompiledStep:
    """Run ``fn`` (one training step) as one XLA program on the jax engine."""
    parts = find_parts(fn)
    if not parts.modules and not parts.optimizers:
        raise TypeError(
            f"compile_step could not find the model or optimizer that {fn.__name__} uses: "
            "it looks them up among the function's globals and closure variables. Refer to "
            "the model and the optimizer by name inside the step function."
        )
    return CompiledStep(fn, parts)
