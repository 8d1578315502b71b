"""Warm starts from ahead-of-time compiled artifacts (torch's ``aot_compile``, torch >= 2.14).

A job that compiles a module the start-up hook found traces it with dynamo and
compiles it with inductor; with a warm compile cache inductor skips the
kernel builds, but dynamo still traces and AOTAutograd still rebuilds its
graphs. Where torch has ``torch.compile(...).aot_compile`` and
``torch.compiler.load_compiled_function``, the module's ``forward`` is
compiled ahead of time instead, forward and backward, at its first compiled
call, and the artifact is saved in the job's compile cache
(``$TRCOMP_CACHE_DIR/aot/<key>.pt2``, beside ``<key>.json``). The next job of
the lineage, or any job reading the same shared cache, loads it: no tracing,
no compiling.

An artifact is used only when it fits. Its key (:func:`artifact_key`) holds
the versions (torch, Python, trcomp), the machine, the module's structure
(classes, parameter and buffer names, shapes, dtypes, ``requires_grad``,
train/eval flags), the call's input signature (shapes, dtypes, devices,
strides; scalar values, which dynamo specializes on), grad mode, autocast and
the ``torch.compile`` arguments. The ``.json`` beside it lists every source
range dynamo traced (the script's ``forward`` and the torch modules it
inlined) with a digest of its text: an edited ``forward`` makes the artifact
stale. Then torch's own guards (:meth:`guard_check`) run before every call;
a call they refuse runs the normal compiled path.

Where ``aot_compile`` does not apply (a graph break: it needs ``fullgraph``;
CUDA graphs; the module's own forward hooks, which ``forward`` does not run;
regional compilation) or anything fails, the module takes the normal
``torch.compile`` path and :class:`AotState` says why. Artifacts live in the
compile cache, so they go through the same trust checks as every other entry
of a shared cache (docs/remote.md): an artifact is pickled code.

Standard library and ``trcomp.contract`` only at import; callers pass ``torch`` in.
"""

from __future__ import annotations

import contextlib
import hashlib
import importlib
import inspect
import json
import os
import platform
import sys
import time
import types
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from trcomp.contract.config import torch_has_aot

__all__ = [
    "AOT_DIR",
    "AotCall",
    "AotState",
    "artifact_key",
    "has_aot_compile",
    "saved_guards",
    "unique_graphs",
    "unsupported_reason",
    "with_guard_filter",
]

AOT_DIR = "aot"
"""The artifacts' folder inside the job's compile cache (``TRCOMP_CACHE_DIR``)."""
_REASON_CHARS = 300
_CUDA_GRAPH_MODES = ("reduce-overhead", "max-autotune")
_MODULE_HOOKS = (
    "_forward_hooks",
    "_forward_pre_hooks",
    "_backward_hooks",
    "_backward_pre_hooks",
)


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


def _call_forward(module: Any, *args: Any, **kwargs: Any) -> Any:
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
    for name in _MODULE_HOOKS:
        if getattr(module, name, None):
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


def _autocast(torch: Any) -> list[Any]:
    found = []
    for device in ("cpu", "cuda"):
        try:
            if torch.is_autocast_enabled(device):
                found.append([device, str(torch.get_autocast_dtype(device))])
        except Exception:  # an older torch without the device argument
            continue
    return found


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
        "autocast": _autocast(torch),
        "compile": {key: str(value) for key, value in sorted(compile_kwargs.items())},
    }
    return hashlib.sha256(json.dumps(facts, sort_keys=True).encode()).hexdigest()[:32]


def _source_digest(module_name: str, first: int, last: int) -> str | None:
    """A digest of lines ``first`` to ``last - 1`` of a module's source as it is now."""
    try:
        module = sys.modules.get(module_name) or importlib.import_module(module_name)
        lines = inspect.getsource(module).splitlines(keepends=True)[first - 1 : last - 1]
    except Exception:
        return None
    return hashlib.sha256("".join(lines).encode()).hexdigest()


def _sources(compiled: Any) -> list[list[Any]]:
    """Every source range dynamo traced for ``compiled``, with its digest now."""
    found = []
    for source in compiled.source_info().inlined_sources:
        digest = _source_digest(source.module, source.firstlineno, source.lastlineno)
        found.append([source.module, source.firstlineno, source.lastlineno, digest])
    return sorted(found, key=lambda item: (item[0], item[1]))


def _stale_source(sources: list[list[Any]]) -> str | None:
    for module_name, first, last, digest in sources:
        if digest is None or _source_digest(module_name, first, last) != digest:
            return f"{module_name} lines {first}-{last - 1} changed since the artifact was saved"
    return None


@dataclass
class AotState:
    """What happened to one module's AOT artifact (part of the hook's report)."""

    path: str = "off"
    """``loaded`` (warm start from an artifact), ``saved`` (compiled ahead of time, saved),
    ``compiled`` (compiled ahead of time, not saved), ``off`` (normal torch.compile path)."""
    reason: str | None = None
    key: str | None = None
    seconds: float = 0.0
    """Compiling (``saved``/``compiled``) or loading (``loaded``) the artifact."""
    calls: int = 0
    other_calls: int = 0
    """Calls the artifact's guards refused, run by the normal compiled path."""
    stale: list[str] = field(default_factory=list)
    discarded_graphs: int = 0
    """Graphs dynamo counted for an attempt that failed: none of them runs."""

    def as_dict(self) -> dict[str, Any]:
        return {
            "path": self.path,
            "reason": self.reason,
            "key": self.key,
            "seconds": round(self.seconds, 4),
            "calls": self.calls,
            "other_calls": self.other_calls,
            "stale": list(self.stale),
            "discarded_graphs": self.discarded_graphs,
        }


class AotCall:
    """The compiled call of one module: its AOT artifact where one fits, else ``fallback``.

    ``fallback`` is the normal ``torch.compile`` of the module's call (compiled
    lazily, at its first call). ``directory`` is where artifacts are kept.
    ``on_ready`` runs once, when an artifact is loaded or compiled (the hook
    removes its global hooks then, as it does when dynamo starts compiling).
    """

    def __init__(
        self,
        torch: Any,
        module: Any,
        fallback: Callable[..., Any],
        *,
        compile_kwargs: dict[str, Any],
        directory: Path,
        trcomp_version: str,
        on_ready: Callable[[], None] | None = None,
    ) -> None:
        self._torch = torch
        self._module = module
        self.fallback = fallback
        self._compile_kwargs = compile_kwargs
        self._directory = directory
        self._trcomp_version = trcomp_version
        self._on_ready = on_ready
        self._fn: Any = None
        self._installed: dict[str, Any] = {}
        """The globals dynamo put in this module's scope while compiling ahead of time."""
        self._first = True
        self.state = AotState()

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        if self._first:
            self._first = False
            self._prepare(args, kwargs)
        fn = self._fn
        if fn is not None:
            if fn.guard_check(self._module, *args, **kwargs):
                self.state.calls += 1
                return fn(self._module, *args, **kwargs)
            self.state.other_calls += 1
        return self.fallback(*args, **kwargs)

    # -- first call: load or compile ahead of time --------------------------------

    def _prepare(self, args: tuple[Any, ...], kwargs: dict[str, Any]) -> None:
        state = self.state
        graphs = unique_graphs()
        try:
            key = artifact_key(
                self._torch, self._module, args, kwargs, self._compile_kwargs, self._trcomp_version
            )
            state.key = key
            started = time.perf_counter()
            loaded = self._load(key, args, kwargs)
            if loaded is not None:
                self._fn, state.path = loaded, "loaded"
            else:
                failed = self._failed_before(key)
                if failed is not None:
                    state.path, state.reason = "off", failed
                    return
                started = time.perf_counter()
                self._fn = self._compile(args, kwargs)
                state.path = "compiled"
                state.reason = self._save(key)
                if state.reason is None:
                    state.path = "saved"
                else:
                    self._remember_failure(key, state.reason)
            state.seconds = time.perf_counter() - started
        except Exception as exc:
            self._fn = None
            state.discarded_graphs = max(0, unique_graphs() - graphs)
            state.path = "off"
            state.reason = _short(f"ahead-of-time compile failed, normal path: {exc}", exc)
            if state.key is not None:
                self._remember_failure(state.key, state.reason)
            return
        if self._on_ready is not None:
            self._on_ready()

    def _paths(self, key: str) -> tuple[Path, Path]:
        return self._directory / f"{key}.pt2", self._directory / f"{key}.json"

    def _load(self, key: str, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
        artifact, meta_path = self._paths(key)
        if not (artifact.is_file() and meta_path.is_file()):
            return None
        try:
            meta = json.loads(meta_path.read_text())
            stale = _stale_source(meta.get("sources") or [])
            if stale is not None:
                self.state.stale.append(stale)
                return None
            fn = _load_artifact(self._torch, artifact, _with_modules(meta.get("modules") or {}))
            fn.disable_guard_check()  # checked before each call, in __call__
            if not fn.guard_check(self._module, *args, **kwargs):
                self.state.stale.append("its guards refused this call")
                return None
            return fn
        except Exception as exc:
            self.state.stale.append(_short("could not be loaded", exc))
            return None

    # -- a failed attempt is not made again by the next jobs -------------------------

    def _class_sources(self) -> list[str]:
        """A digest of the source file of every module class in the model."""
        files = set()
        for sub in self._module.modules():
            try:
                files.add(inspect.getsourcefile(type(sub)) or "")
            except TypeError:
                continue
        return sorted(f"{name}:{_file_digest(name)}" for name in files if name)

    def _failed_before(self, key: str) -> str | None:
        """The reason an earlier job's attempt for ``key`` failed, if the model's code is
        the same; else None (try)."""
        marker = self._directory / f"{key}.failed.json"
        try:
            failed = json.loads(marker.read_text())
        except (OSError, ValueError):
            return None
        if not isinstance(failed, dict) or failed.get("classes") != self._class_sources():
            return None
        return (
            "an earlier job's ahead-of-time compile of this model failed, not tried again "
            f"until its code changes (normal path): {failed.get('reason')}"
        )[:_REASON_CHARS]

    def _remember_failure(self, key: str, reason: str) -> None:
        marker = self._directory / f"{key}.failed.json"
        partial = marker.with_name(marker.name + ".partial")
        try:
            self._directory.mkdir(parents=True, exist_ok=True)
            partial.write_text(json.dumps({"reason": reason, "classes": self._class_sources()}))
            os.replace(partial, marker)
        except OSError:
            partial.unlink(missing_ok=True)

    def _compile(self, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
        options = with_guard_filter(self._torch, {**self._compile_kwargs, "fullgraph": True})
        compiled = self._torch.compile(_call_forward, **options)
        scope = _call_forward.__globals__
        before = set(scope)
        with _once_logs_ignored(self._torch), _grads_set_aside(self._module):
            fn = compiled.aot_compile(((self._module, *args), kwargs))
        self._installed = {name: scope[name] for name in set(scope) - before}
        fn.disable_guard_check()
        return fn

    def _save(self, key: str) -> str | None:
        """Save the artifact and its sources; the reason when it could not be saved."""
        artifact, meta_path = self._paths(key)
        partial = artifact.with_name(artifact.name + ".partial")
        try:
            sources = _sources(self._fn)
            if any(digest is None for *_, digest in sources):
                return "a traced source could not be read back, so staleness could not be checked"
            modules = {
                name: value.__name__
                for name, value in self._installed.items()
                if isinstance(value, types.ModuleType)
            }
            self._directory.mkdir(parents=True, exist_ok=True)
            self._fn.save_compiled_function(str(partial))
            # Loaded as the next job would load it: without the globals this process got.
            fresh = {k: v for k, v in _call_forward.__globals__.items() if k not in self._installed}
            _load_artifact(self._torch, partial, {**fresh, **_imported(modules)})
            meta = {
                "key": key,
                "sources": sources,
                "modules": modules,
                "torch": self._torch.__version__,
            }
            meta_partial = meta_path.with_name(meta_path.name + ".partial")
            meta_partial.write_text(json.dumps(meta, indent=1))
            os.replace(partial, artifact)
            os.replace(meta_partial, meta_path)
        except Exception as exc:
            partial.unlink(missing_ok=True)
            return _short("compiled ahead of time but not saved", exc)
        return None


def with_guard_filter(torch: Any, compile_kwargs: dict[str, Any]) -> dict[str, Any]:
    """``compile_kwargs`` with :func:`saved_guards` as the guard filter of the artifact.

    torch.compile takes a guard filter only in ``options``, and refuses ``mode`` beside
    ``options``: a mode becomes the inductor options it stands for, as torch.compile
    does with it (``torch._inductor.list_mode_options``).
    """
    kwargs = dict(compile_kwargs)
    mode = kwargs.pop("mode", None)
    options = dict(torch._inductor.list_mode_options(mode, kwargs.get("dynamic"))) if mode else {}
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
    manager = importlib.import_module("torch._dynamo.guards").CheckFunctionManager
    unsupported = set(manager.UNSUPPORTED_SERIALIZATION_GUARD_TYPES)

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
def _once_logs_ignored(torch: Any) -> Iterator[None]:
    """While ``aot_compile`` traces: dynamo skips calls of the "log once" methods.

    An artifact is one graph, and dynamo cannot put a logger call in one outside
    export: transformers' models log once from ``forward`` (GPT-2's loss: "loss_type=None
    ... Using the default loss"), which made every such model take the normal path.
    Skipping is exact for a message already logged: the hook's first compiled call
    comes after at least one eager step, which logged it, and a "once" method logs
    nothing on later calls. The normal path (a graph break around the call) is unchanged.
    """
    config = torch._dynamo.config
    methods = once_logging_methods()
    if not methods or not hasattr(config, "ignore_logging_functions"):
        yield
        return
    with config.patch(ignore_logging_functions={*config.ignore_logging_functions, *methods}):
        yield


@contextlib.contextmanager
def _grads_set_aside(module: Any) -> Iterator[None]:
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


def _load_artifact(torch: Any, path: Path, scope: dict[str, Any]) -> Any:
    """The compiled function saved at ``path``; ``scope``: the globals its code runs with."""
    with path.open("rb") as handle:
        return torch.compiler.load_compiled_function(handle, f_globals=scope)


def _imported(modules: dict[str, str]) -> dict[str, Any]:
    """``modules`` imported; one that does not import is left out (if the artifact's code
    needs it, torch refuses the artifact, and the reason is recorded)."""
    found = {}
    for name, module in modules.items():
        with contextlib.suppress(Exception):
            found[name] = importlib.import_module(module)
    return found


def _with_modules(modules: dict[str, str]) -> dict[str, Any]:
    """This module's globals, with the modules the artifact's code reads by global name.

    dynamo's generated code reads a module that is not a global of the traced function
    (GPT-2's output, an ``OrderedDict``, needs ``collections``) through a global it adds
    to the function's scope, ``___module_<name>_<id>_c<n>``; a new process lacks it, and
    ``load_compiled_function`` refuses the artifact. The saving job records each such
    name with its module's import name; the loading job puts them back, as dynamo did.
    """
    scope = _call_forward.__globals__
    for name, module in _imported(modules).items():
        scope.setdefault(name, module)
    return scope


def unique_graphs() -> int:
    """Graphs dynamo has counted in this process (it counts a graph before the backend
    compiles it, so an attempt whose compile failed counts too)."""
    if "torch._dynamo" not in sys.modules:
        return 0
    return int(importlib.import_module("torch._dynamo.utils").counters["stats"]["unique_graphs"])


def _file_digest(path: str) -> str | None:
    try:
        return hashlib.sha256(Path(path).read_bytes()).hexdigest()[:16]
    except OSError:
        return None


def _short(prefix: str, exc: BaseException) -> str:
    text = " ".join(f"{type(exc).__name__}: {exc}".split())
    return f"{prefix}: {text}"[:_REASON_CHARS]
