"""What an artifact's compile and load need: its guards, its scope, and two tracing fixes.

See :mod:`trcomp_container.inprocess.aot` for the whole story.
"""

from __future__ import annotations

import contextlib
import importlib
import types
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

from trcomp_container.inprocess import torch_compat
from trcomp_container.inprocess.aot.key import call_forward

__all__ = [
    "grads_set_aside",
    "imported",
    "load_artifact",
    "once_logging_methods",
    "once_logs_ignored",
    "saved_guards",
    "with_guard_filter",
    "with_modules",
]


def with_guard_filter(torch: Any, compile_kwargs: dict[str, Any]) -> dict[str, Any]:
    """``compile_kwargs`` with :func:`saved_guards` as the guard filter of the artifact.

    torch.compile takes a guard filter only in ``options``, and refuses ``mode`` beside
    ``options``: a mode becomes the inductor options it stands for, as torch.compile
    does with it (``torch._inductor.list_mode_options``).
    """
    kwargs = dict(compile_kwargs)
    mode = kwargs.pop("mode", None)
    options = torch_compat.list_mode_options(mode, kwargs.get("dynamic")) if mode else {}
    kwargs["options"] = {**options, "guard_filter_fn": saved_guards(torch)}
    return kwargs


def saved_guards(torch: Any) -> Callable[[Any], list[bool]]:
    """The guard filter of an artifact: torch's own for ``aot_compile``, and code identity.

    torch's default for ``aot_compile`` keeps every guard but global ones and those of
    the kinds it cannot serialize. It fails where such a kind hides under another
    guard: a decorator whose wrapper reads the wrapped function's code (transformers'
    ``merge_with_config_defaults`` on every ``PreTrainedModel.forward`` it decorates:
    GPT-2 on 2.14) gets a constant guard on that code object, checked by identity,
    which no other process could pass. Such guards are left out too. What they
    protect, that the code traced is the code run, the artifact checks itself:
    its ``.json`` holds a digest of every source range dynamo traced, the wrapped
    function's included, compared before the artifact is loaded.
    """
    unsupported = torch_compat.unsupported_serialization_guards()

    def keep(entries: Any) -> list[bool]:
        return [
            not (
                entry.is_global
                or entry.guard_type in unsupported
                or (
                    entry.has_value
                    and isinstance(entry.value, types.CodeType)
                    and unsupported.intersection(entry.derived_guard_types)
                )
            )
            for entry in entries
        ]

    return keep


def once_logging_methods() -> list[Callable[..., Any]]:
    """The "log once" methods libraries put on ``logging.Logger`` (transformers'
    ``warning_once``, ``info_once``): ``functools.lru_cache`` functions named ``*_once``."""
    import logging

    return [
        method
        for name, method in vars(logging.Logger).items()
        if name.endswith("_once") and callable(getattr(method, "cache_info", None))
    ]


@contextlib.contextmanager
def once_logs_ignored(torch: Any) -> Iterator[None]:
    """While ``aot_compile`` traces: dynamo skips calls of the "log once" methods.

    An artifact is one graph, and dynamo cannot put a logger call in one outside
    export: transformers' models log once from ``forward`` (GPT-2's loss: "loss_type=None
    ... Using the default loss"), which made every such model take the normal path.
    Skipping is exact for a message already logged: the hook's first compiled call
    comes after at least one eager step, which logged it, and a "once" method logs
    nothing on later calls. The normal path (a graph break around the call) is unchanged.
    """
    config = torch_compat.dynamo_config()
    methods = once_logging_methods()
    if not methods or not hasattr(config, "ignore_logging_functions"):
        yield
        return
    with config.patch(ignore_logging_functions={*config.ignore_logging_functions, *methods}):
        yield


@contextlib.contextmanager
def grads_set_aside(module: Any) -> Iterator[None]:
    """While ``aot_compile`` traces: the module's parameters hold no ``.grad``.

    torch 2.14 pickles the tensors its guards look at, with their ``.grad``, when
    it builds the guards; a ``.grad`` outside the guards becomes a placeholder that
    the loading process refuses ("assigned grad expected to be a Tensor or None").
    A script that calls ``zero_grad()`` after its forward, or accumulates
    gradients, makes its first compiled call with gradients in place. A forward
    does not read ``.grad`` and the guards do not check it; the gradients are put
    back before the call runs.
    """
    held = [(param, param.grad) for param in module.parameters() if param.grad is not None]
    for param, _ in held:
        param.grad = None
    try:
        yield
    finally:
        for param, grad in held:
            param.grad = grad


def load_artifact(torch: Any, path: Path, scope: dict[str, Any]) -> Any:
    """The compiled function saved at ``path``; ``scope``: the globals its code runs with."""
    with path.open("rb") as handle:
        return torch.compiler.load_compiled_function(handle, f_globals=scope)


def imported(modules: dict[str, str]) -> dict[str, Any]:
    """``modules`` imported; one that does not import is left out (if the artifact's code
    needs it, torch refuses the artifact, and the reason is recorded)."""
    found = {}
    for name, module in modules.items():
        with contextlib.suppress(Exception):
            found[name] = importlib.import_module(module)
    return found


def with_modules(modules: dict[str, str]) -> dict[str, Any]:
    """This module's globals, with the modules the artifact's code reads by global name.

    dynamo's generated code reads a module that is not a global of the traced function
    (GPT-2's output, an ``OrderedDict``, needs ``collections``) through a global it adds
    to the function's scope, ``___module_<name>_<id>_c<n>``; a new process lacks it, and
    ``load_compiled_function`` refuses the artifact. The saving job records each such
    name with its module's import name; the loading job puts them back, as dynamo did.
    """
    scope = call_forward.__globals__
    for name, module in imported(modules).items():
        scope.setdefault(name, module)
    return scope
