"""One module's compiled call: its ahead-of-time artifact where one fits, else the normal path.

See :mod:`trcomp_container.inprocess.aot` for the whole story.
"""

from __future__ import annotations

import inspect
import json
import os
import time
import types
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from trcomp_container.inprocess import torch_compat
from trcomp_container.inprocess.aot.guards import (
    grads_set_aside,
    imported,
    load_artifact,
    once_logs_ignored,
    with_guard_filter,
    with_modules,
)
from trcomp_container.inprocess.aot.key import (
    artifact_key,
    call_forward,
    file_digest,
    sources,
    stale_source,
)

__all__ = ["AotCall", "AotState"]

_REASON_CHARS = 300


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
        graphs = torch_compat.unique_graphs()
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
        except Exception as exc:  # an artifact that fails any way takes the normal compiled path
            self._fn = None
            state.discarded_graphs = max(0, torch_compat.unique_graphs() - graphs)
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
            stale = stale_source(meta.get("sources") or [])
            if stale is not None:
                self.state.stale.append(stale)
                return None
            fn = load_artifact(self._torch, artifact, with_modules(meta.get("modules") or {}))
            fn.disable_guard_check()  # checked before each call, in __call__
            if not fn.guard_check(self._module, *args, **kwargs):
                self.state.stale.append("its guards refused this call")
                return None
            return fn
        except Exception as exc:  # an artifact that fails any way takes the normal compiled path
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
        return sorted(f"{name}:{file_digest(name)}" for name in files if name)

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
        compiled = self._torch.compile(call_forward, **options)
        scope = call_forward.__globals__
        before = set(scope)
        with once_logs_ignored(self._torch), grads_set_aside(self._module):
            fn = compiled.aot_compile(((self._module, *args), kwargs))
        self._installed = {name: scope[name] for name in set(scope) - before}
        fn.disable_guard_check()
        return fn

    def _save(self, key: str) -> str | None:
        """Save the artifact and its sources; the reason when it could not be saved."""
        artifact, meta_path = self._paths(key)
        partial = artifact.with_name(artifact.name + ".partial")
        try:
            traced = sources(self._fn)
            if any(digest is None for *_, digest in traced):
                return "a traced source could not be read back, so staleness could not be checked"
            modules = {
                name: value.__name__
                for name, value in self._installed.items()
                if isinstance(value, types.ModuleType)
            }
            self._directory.mkdir(parents=True, exist_ok=True)
            self._fn.save_compiled_function(str(partial))
            # Loaded as the next job would load it: without the globals this process got.
            fresh = {k: v for k, v in call_forward.__globals__.items() if k not in self._installed}
            load_artifact(self._torch, partial, {**fresh, **imported(modules)})
            meta = {
                "key": key,
                "sources": traced,
                "modules": modules,
                "torch": self._torch.__version__,
            }
            meta_partial = meta_path.with_name(meta_path.name + ".partial")
            meta_partial.write_text(json.dumps(meta, indent=1))
            os.replace(partial, artifact)
            os.replace(meta_partial, meta_path)
        except Exception as exc:  # an artifact that fails any way takes the normal compiled path
            partial.unlink(missing_ok=True)
            return _short("compiled ahead of time but not saved", exc)
        return None


def _short(prefix: str, exc: BaseException) -> str:
    text = " ".join(f"{type(exc).__name__}: {exc}".split())
    return f"{prefix}: {text}"[:_REASON_CHARS]
