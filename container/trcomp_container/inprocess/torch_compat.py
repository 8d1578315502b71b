"""Every private name of torch the in-process package reads or writes, one small function each.

torch changes its private parts between releases without notice; here is the
one place that touches them, and tests/container/inprocess/test_torch_compat.py
pins each function against the installed torch (``make test`` on 2.9,
``make test-214`` on 2.14): a rename fails there, not in a user's job.
Functions that read a module which the script has not imported return a
neutral value instead of importing it. Standard library only at import.
"""

from __future__ import annotations

import importlib
import sys
from collections.abc import Callable
from types import ModuleType
from typing import Any

__all__ = [
    "CODECACHE_HEADER_NAMES",
    "COMPILED_BACKWARD_NODE",
    "COMPILED_CALL_IMPL",
    "MODULE_HOOK_NAMES",
    "REDIS_BACKEND_METHODS",
    "REMOTE_CACHE_FLAGS",
    "backend_of",
    "backward_compile_seconds",
    "c10d_store",
    "compile_times_text",
    "compiled_call_impl",
    "counters",
    "current_graph_task_id",
    "current_graph_task_keeps_graph",
    "dynamo_config",
    "dynamo_exception",
    "graph_break_counts",
    "has_module_hooks",
    "inductor_cache_counts",
    "inductor_config",
    "is_higher_order_op",
    "list_mode_options",
    "optimized_module_class",
    "redis_backend_class",
    "register_compile_callbacks",
    "set_compiled_call_impl",
    "set_remote_cache_flags",
    "unique_graphs",
    "unsupported_serialization_guards",
]

COMPILED_BACKWARD_NODE = "CompiledFunction"
"""Part of the class name of the autograd node a compiled region's backward runs in
(``CompiledFunctionBackward``, AOTAutograd's, torch 2.9 to 2.14)."""
COMPILED_CALL_IMPL = "_compiled_call_impl"
"""Where ``nn.Module.compile()`` keeps a module's compiled call (torch 2.2 to 2.14)."""
MODULE_HOOK_NAMES = (
    "_forward_hooks",
    "_forward_pre_hooks",
    "_backward_hooks",
    "_backward_pre_hooks",
)
"""A module's own hook dictionaries (``forward`` alone does not run them)."""
CODECACHE_HEADER_NAMES = ("_HEADER_DIR", "_HEADER_LOCK_DIR")
"""Where inductor keeps precompiled headers (``torch._inductor.codecache``)."""
REDIS_BACKEND_METHODS = ("_get", "_put")
"""The two methods of inductor's ``RedisRemoteCacheBackend`` that talk to Redis."""
REMOTE_CACHE_FLAGS = {
    "fx_graph": ("torch._inductor.config", "fx_graph_remote_cache"),
    "autograd": ("torch._functorch.config", "enable_remote_autograd_cache"),
    "dynamo_pgo": ("torch._dynamo.config", "automatic_dynamic_remote_pgo"),
    "autotune": ("torch._inductor.config", "autotune_remote_cache"),
    "bundled_autotune": ("torch._inductor.config", "bundled_autotune_remote_cache"),
}
"""Each remote cache of inductor (the Redis handoff's names) -> the config module and flag
that turn it on (torch 2.9; torch reads their ``TORCHINDUCTOR_*`` variables at import only,
so set here they hold in this process and no other)."""


def _loaded(name: str) -> ModuleType | None:
    return sys.modules.get(name)


def counters() -> Any:
    """dynamo's counters (``torch._dynamo.utils.counters``), or None before dynamo is imported.

    The one reader of dynamo's counters in the package: everything below goes through it.
    """
    if _loaded("torch._dynamo") is None:
        return None
    return importlib.import_module("torch._dynamo.utils").counters


def unique_graphs() -> int:
    """Graphs dynamo has counted in this process (counted before the backend compiles
    them, so an attempt whose compile failed counts too)."""
    found = counters()
    return 0 if found is None else int(found["stats"]["unique_graphs"])


def graph_break_counts() -> dict[str, int]:
    """dynamo's graph breaks, by reason."""
    found = counters()
    return {} if found is None else {str(k): int(v) for k, v in found["graph_break"].items()}


def inductor_cache_counts() -> dict[str, int] | None:
    """Hits and misses of inductor's FX-graph cache and AOTAutograd's cache."""
    found = counters()
    if found is None:
        return None
    return {
        "fxgraph_hit": int(found["inductor"]["fxgraph_cache_hit"]),
        "fxgraph_miss": int(found["inductor"]["fxgraph_cache_miss"]),
        "aotautograd_hit": int(found["aot_autograd"]["autograd_cache_hit"]),
        "aotautograd_miss": int(found["aot_autograd"]["autograd_cache_miss"]),
    }


def compile_times_text() -> str | None:
    """dynamo's compile times as text (``torch._dynamo.utils.compile_times``)."""
    if _loaded("torch._dynamo") is None:
        return None
    utils = importlib.import_module("torch._dynamo.utils")
    return str(utils.compile_times(repr="str", aggregate=True))


def backward_compile_seconds() -> float:
    """Seconds AOTAutograd spent compiling backward graphs lazily, at their first backward
    (``torch._dynamo.utils.compilation_time_metrics["backward._backward_impl"]``); 0.0
    before dynamo is imported or when the backend records none (``aot_eager``)."""
    if _loaded("torch._dynamo.utils") is None:
        return 0.0
    metrics = importlib.import_module("torch._dynamo.utils").compilation_time_metrics
    return float(sum(metrics.get("backward._backward_impl", ())))


def backend_of(torch: Any, backend: Any, mode: str | None, options: Any, dynamic: Any) -> Any:
    """The dynamo backend ``torch.compile(backend=..., mode=..., options=...)`` would use,
    as a callable ``(graph_module, example_inputs) -> compiled``.

    ``"inductor"``: ``torch._TorchCompileInductorWrapper`` with the mode and options (what
    ``torch.compile`` builds itself); another name: dynamo's registry
    (``torch._dynamo.lookup_backend``); a callable: itself.
    """
    if backend == "inductor":
        return torch._TorchCompileInductorWrapper(mode, options, dynamic)
    if isinstance(backend, str):
        return importlib.import_module("torch._dynamo").lookup_backend(backend)
    return backend


def is_higher_order_op(target: Any) -> bool:
    """Whether an FX node's target is a higher-order operator (``invoke_subgraph`` of a
    nested compile region, ``checkpoint``...): ``torch._ops.HigherOrderOperator``."""
    ops = _loaded("torch._ops")
    kind = getattr(ops, "HigherOrderOperator", None)
    return isinstance(kind, type) and isinstance(target, kind)


def register_compile_callbacks(
    start: Callable[[Any], None], end: Callable[[Any], None]
) -> Callable[[], None]:
    """Register dynamo's compile start and end callbacks; returns their removal."""
    handler = importlib.import_module("torch._dynamo.callback").callback_handler
    handler.register_start_callback(start)
    handler.register_end_callback(end)

    def remove() -> None:
        handler.remove_start_callback(start)
        handler.remove_end_callback(end)

    return remove


def dynamo_config() -> Any:
    """``torch._dynamo.config`` (its ``reorderable_logging_functions``,
    ``ignore_logging_functions`` and ``patch`` are used)."""
    return importlib.import_module("torch._dynamo.config")


def inductor_config() -> Any:
    """``torch._inductor.config`` (``patch`` and ``fallback_random`` are used)."""
    return importlib.import_module("torch._inductor.config")


def list_mode_options(mode: str, dynamic: Any) -> dict[str, Any]:
    """The inductor options a ``torch.compile`` mode stands for."""
    inductor = importlib.import_module("torch._inductor")
    return dict(inductor.list_mode_options(mode, dynamic))


def unsupported_serialization_guards() -> set[str]:
    """Guard kinds torch cannot save in an ahead-of-time artifact."""
    guards = importlib.import_module("torch._dynamo.guards")
    return set(guards.CheckFunctionManager.UNSUPPORTED_SERIALIZATION_GUARD_TYPES)


def current_graph_task_id() -> int:
    """The autograd graph task running now; -1 outside a backward pass."""
    torch = importlib.import_module("torch")
    return int(torch._C._current_graph_task_id())


def current_graph_task_keeps_graph() -> bool:
    """Whether the backward running now keeps its graph (``retain_graph=True``), as
    AOTAutograd reads it for its donated buffers (outside a backward: True)."""
    torch = importlib.import_module("torch")
    return bool(torch._C._autograd._get_current_graph_task_keep_graph())


def optimized_module_class() -> type | None:
    """``torch._dynamo.OptimizedModule`` (what ``torch.compile(module)`` returns)."""
    dynamo = importlib.import_module("torch._dynamo")
    found = getattr(dynamo, "OptimizedModule", None)
    return found if isinstance(found, type) else None


def dynamo_exception() -> type[BaseException]:
    """The base class of dynamo's and the backends' compile errors."""
    return importlib.import_module("torch._dynamo.exc").TorchDynamoException  # type: ignore[no-any-return]


def compiled_call_impl(module: Any) -> Any:
    """A module's compiled call, set by ``nn.Module.compile()`` (or by the hook); None."""
    return module.__dict__.get(COMPILED_CALL_IMPL)


def set_compiled_call_impl(module: Any, call: Callable[..., Any] | None) -> None:
    """Make ``module(...)`` run ``call`` (None: its own forward again), as ``compile()`` does.

    ``nn.Module.__init__`` sets the attribute to None, and ``__call__`` reads it.
    """
    setattr(module, COMPILED_CALL_IMPL, call)


def has_module_hooks(module: Any) -> bool:
    """Whether the module has forward or backward hooks of its own."""
    return any(getattr(module, name, None) for name in MODULE_HOOK_NAMES)


def redis_backend_class(remote_cache: ModuleType) -> type | None:
    """Inductor's ``RedisRemoteCacheBackend`` when it still has ``_get`` and ``_put``."""
    backend = getattr(remote_cache, "RedisRemoteCacheBackend", None)
    if not isinstance(backend, type):
        return None
    if not all(callable(getattr(backend, name, None)) for name in REDIS_BACKEND_METHODS):
        return None
    return backend


def set_remote_cache_flags(module_name: str, caches: tuple[str, ...]) -> Callable[[], None]:
    """Turn on, in the config module ``module_name`` (just imported), the flags of ``caches``
    that live there; returns the undo."""
    module = importlib.import_module(module_name)
    flags = [flag for cache, (where, flag) in REMOTE_CACHE_FLAGS.items()
             if where == module_name and cache in caches]  # fmt: skip
    before = {flag: getattr(module, flag) for flag in flags}
    for flag in flags:
        setattr(module, flag, True)

    def undo() -> None:
        for flag, value in before.items():
            setattr(module, flag, value)

    return undo


def c10d_store() -> Any:
    """The default process group's c10d store, or None without one.

    The speed-up measurement exchanges its figures there, never on the training group.
    """
    try:
        from torch.distributed import distributed_c10d

        return distributed_c10d._get_default_store()
    except (ImportError, AttributeError, RuntimeError, ValueError):
        return None
