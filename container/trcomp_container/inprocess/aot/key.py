"""What an ahead-of-time artifact depends on: its key, the sources it traced, whether it fits.

See :mod:`trcomp_container.inprocess.aot` for the whole story.
"""

from __future__ import annotations

import hashlib
import importlib
import inspect
import json
import platform
import sys
from pathlib import Path
from typing import Any

from trcomp.contract.config import torch_has_aot
from trcomp_container.inprocess import torch_compat
from trcomp_container.inprocess.speedup.key import autocast_state

__all__ = [
    "artifact_key",
    "call_forward",
    "file_digest",
    "has_aot_compile",
    "sources",
    "stale_source",
    "unsupported_reason",
]

_CUDA_GRAPH_MODES = ("reduce-overhead", "max-autotune")


def has_aot_compile(torch: Any) -> bool:
    """Whether this torch compiles ahead of time: ``torch.compile(fn).aot_compile`` and loading.

    torch 2.9 has ``load_compiled_function`` but no ``aot_compile``; the versions between
    2.9 and 2.14 are not supported by trcomp, so 2.14 is the floor.
    """
    if not torch_has_aot(torch.__version__):
        return False
    wrapped = torch.compile(_identity, fullgraph=True)  # lazy: nothing is traced here
    return hasattr(wrapped, "aot_compile") and hasattr(torch.compiler, "load_compiled_function")


def _identity(value: Any) -> Any:
    return value


def call_forward(module: Any, *args: Any, **kwargs: Any) -> Any:
    """What is compiled ahead of time: the module is an argument, so the artifact holds
    no module (a closure over one cannot be saved) and any instance of the same
    structure can call it. ``torch.compile(module.forward)`` would not do: dynamo
    skips the frames of ``torch.nn``'s own modules (``nn.Sequential``) and wraps
    their forward in a closure."""
    return module.forward(*args, **kwargs)


def unsupported_reason(torch: Any, module: Any, compile_kwargs: dict[str, Any]) -> str | None:
    """Why ``module`` cannot get an AOT artifact on this torch; None: it can."""
    if not has_aot_compile(torch):
        return f"torch {torch.__version__} has no aot_compile (torch 2.14 has)"
    if compile_kwargs.get("backend", "inductor") != "inductor":
        return "only inductor's artifacts are saved"
    if compile_kwargs.get("mode") in _CUDA_GRAPH_MODES:
        mode = compile_kwargs["mode"]
        return f"mode={mode!r} records CUDA graphs, which an artifact does not hold"
    if torch_compat.has_module_hooks(module):
        return "the module has hooks of its own, which its forward alone would not run"
    return None


def _describe(value: Any, torch: Any, depth: int = 0) -> Any:
    """What a compiled graph depends on in one argument (JSON-able)."""
    if isinstance(value, torch.Tensor):
        return [
            "tensor",
            list(value.shape),
            list(value.stride()),
            str(value.dtype),
            value.device.type,
            bool(value.requires_grad),
        ]
    if value is None or isinstance(value, (bool, int, float, str)):
        return [type(value).__name__, value]
    if depth < 4 and isinstance(value, (list, tuple)):
        return [type(value).__name__, [_describe(item, torch, depth + 1) for item in value]]
    if depth < 4 and isinstance(value, dict):
        return [
            "dict",
            [[str(key), _describe(item, torch, depth + 1)] for key, item in value.items()],
        ]
    return [type(value).__module__ + "." + type(value).__qualname__]


def artifact_key(
    torch: Any,
    module: Any,
    args: tuple[Any, ...],
    kwargs: dict[str, Any],
    compile_kwargs: dict[str, Any],
    trcomp_version: str,
) -> str:
    """The name of the artifact that fits this module, call and setting (a digest)."""
    facts = {
        "torch": torch.__version__,
        "python": list(sys.version_info[:3]),
        "trcomp": trcomp_version,
        "machine": platform.machine(),
        "classes": [
            f"{type(sub).__module__}.{type(sub).__qualname__}:{int(sub.training)}"
            for sub in module.modules()
        ],
        "parameters": [
            [name, *_describe(param, torch)] for name, param in module.named_parameters()
        ],
        "buffers": [[name, *_describe(buffer, torch)] for name, buffer in module.named_buffers()],
        "args": [_describe(arg, torch) for arg in args],
        "kwargs": [[name, _describe(value, torch)] for name, value in sorted(kwargs.items())],
        "grad": bool(torch.is_grad_enabled()),
        "autocast": autocast_state(torch),
        "compile": {key: str(value) for key, value in sorted(compile_kwargs.items())},
    }
    return hashlib.sha256(json.dumps(facts, sort_keys=True).encode()).hexdigest()[:32]


def _source_digest(module_name: str, first: int, last: int) -> str | None:
    """A digest of lines ``first`` to ``last - 1`` of a module's source as it is now."""
    try:
        module = sys.modules.get(module_name) or importlib.import_module(module_name)
        lines = inspect.getsource(module).splitlines(keepends=True)[first - 1 : last - 1]
    except Exception:  # any module, any import error: the digest is unknown, so stale
        return None
    return hashlib.sha256("".join(lines).encode()).hexdigest()


def sources(compiled: Any) -> list[list[Any]]:
    """Every source range dynamo traced for ``compiled``, with its digest now."""
    found = []
    for source in compiled.source_info().inlined_sources:
        digest = _source_digest(source.module, source.firstlineno, source.lastlineno)
        found.append([source.module, source.firstlineno, source.lastlineno, digest])
    return sorted(found, key=lambda item: (item[0], item[1]))


def stale_source(sources: list[list[Any]]) -> str | None:
    for module_name, first, last, digest in sources:
        if digest is None or _source_digest(module_name, first, last) != digest:
            return f"{module_name} lines {first}-{last - 1} changed since the artifact was saved"
    return None


def file_digest(path: str) -> str | None:
    try:
        return hashlib.sha256(Path(path).read_bytes()).hexdigest()[:16]
    except OSError:
        return None
