"""What the start-up hook compiles by itself: the zero-code path for plain PyTorch loops.

A plain loop (no trcomp import, no ``torch.compile``) under ``backend="inductor"``
would otherwise train eager. While the script runs its first optimizer step,
a global module forward pre-hook watches the modules the script calls and
compiles, in place (as ``nn.Module.compile`` does, with the config's mode,
fullgraph and dynamic), each **outermost** module called

- in training mode (``module.training``), with gradients enabled,
- that has parameters with ``requires_grad`` (it is being trained),
- that the script has not compiled itself (``torch.compile(model)``,
  ``model.compile()``, ``trcomp.runtime.compile``, HF Trainer/Accelerate).

With ``regional`` (the default) a module's repeated blocks (the children of
an ``nn.ModuleList``/``nn.Sequential`` sharing one class, as in every
transformer) are marked as nested compile regions first, so inductor compiles
one block for every layer and the cold compile grows less with the layers;
the module is still one graph (``trcomp.contract.regions``).

A frozen teacher in ``eval()`` or under ``torch.no_grad()``, a loss module
without parameters and anything called inside another module are left as they
are. The first step runs eager; the compiled module runs from its next call.
After the first optimizer step the hooks are removed, so a model called for the
first time later is not compiled and the steady loop carries no hook overhead.

A module whose compilation fails (dynamo cannot trace it, the backend fails)
runs eager from then on when ``fallback="eager"``; the reason is kept for the
summary. With ``fallback="fail"`` the error propagates.

Standard library and ``trcomp.contract`` only at import; torch is imported by the
caller's callbacks.
"""

from __future__ import annotations

import warnings
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from trcomp.contract.regions import RegionalCall, compile_in_place

__all__ = ["AutoCompile", "CompiledModule", "candidate_reason", "module_signature"]

# torch.compile(module) warns that global hooks fire an extra time for its wrapper;
# ours are built for that (they skip the wrapper) and only live for the first step.
_GLOBAL_HOOK_WARNING = r"Using `torch.compile\(module\)` when there are global hooks"
_REASON_CHARS = 500


@dataclass
class CompiledModule:
    """One module the hook compiled (or tried to)."""

    name: str
    parameters: int
    failed: str | None = None
    call: RegionalCall | None = None

    @property
    def regional(self) -> str | None:
        """The repeated blocks compiled once for all layers, e.g. ``"12 x GPT2Block"``."""
        return None if self.call is None else self.call.describe()

    def as_dict(self) -> dict[str, Any]:
        return {
            "module": self.name,
            "parameters": self.parameters,
            "failed": self.failed,
            "regional": self.regional,
            "regional_off": None if self.call is None else self.call.unmarked,
        }


def module_signature(module: Any) -> str:
    """A short description of a module's structure: class name and parameter shapes."""
    shapes = ",".join(
        f"{name}:{tuple(param.shape)}:{str(param.dtype).removeprefix('torch.')}"
        for name, param in module.named_parameters()
    )
    return f"{type(module).__qualname__}[{shapes}]"


def candidate_reason(module: Any, torch: Any) -> str | None:
    """Why ``module`` (called at the outermost level) is not compiled; None: compile it."""
    if _script_compiled(module, torch):
        return "compiled by the script"
    if not module.training:
        return "eval mode"
    if not torch.is_grad_enabled():
        return "called with gradients disabled"
    if not any(param.requires_grad for param in module.parameters()):
        return "no trainable parameters"
    return None


def _script_compiled(module: Any, torch: Any) -> bool:
    optimized = getattr(torch._dynamo, "OptimizedModule", None)
    if optimized is not None and isinstance(module, optimized):
        return True
    # Module.compile() keeps its compiled callable here (torch 2.2 to 2.9 at least;
    # tests/container/test_autocompile.py fails if torch renames it). A submodule
    # compiled by the script (regional compilation by trcomp.runtime or Accelerate)
    # counts too: the model is the script's business then.
    for sub in module.modules():
        if getattr(sub, "_compiled_call_impl", None) is not None:
            return True
        if optimized is not None and isinstance(sub, optimized):
            return True
    return False


def _wrapped_by_ddp(module: Any, torch: Any) -> Any:
    parallel = torch.nn.parallel
    wrappers = (parallel.DistributedDataParallel, parallel.DataParallel)
    return module.module if isinstance(module, wrappers) else None


class AutoCompile:
    """The forward hooks that find and compile the outermost trained modules.

    ``compile_kwargs`` are the ``torch.compile`` arguments the config asks for;
    ``fallback_eager`` says whether a failing compilation falls back to eager;
    ``regional`` whether a module with repeated blocks gets those compiled instead.
    ``on_model`` is called with each outermost trained module seen (compiled by
    the hook or by the script), e.g. to fingerprint the model.
    """

    def __init__(
        self,
        torch: Any,
        *,
        compile_kwargs: dict[str, Any],
        fallback_eager: bool,
        regional: bool = True,
        on_model: Callable[[Any], None] | None = None,
    ) -> None:
        self._torch = torch
        self.compile_kwargs = compile_kwargs
        self.fallback_eager = fallback_eager
        self.regional = regional
        self.on_model = on_model
        self.compiled: list[CompiledModule] = []
        self.skipped: dict[str, str] = {}
        self.script_compiled: list[str] = []
        self._depth = 0
        self._seen: set[int] = set()
        self._handles: list[Any] = []

    # -- lifetime ---------------------------------------------------------------

    def install(self) -> None:
        """Register the global hooks (until :meth:`remove`)."""
        from torch.nn.modules.module import (
            register_module_forward_hook,
            register_module_forward_pre_hook,
        )

        warnings.filterwarnings("ignore", message=_GLOBAL_HOOK_WARNING)
        self._handles = [
            register_module_forward_pre_hook(self._pre),
            register_module_forward_hook(self._post, always_call=True),
        ]

    def remove(self) -> None:
        """Remove the global hooks; modules already compiled stay compiled."""
        for handle in self._handles:
            handle.remove()
        self._handles = []

    @property
    def active(self) -> bool:
        return bool(self._handles)

    # -- the hooks --------------------------------------------------------------

    def _pre(self, module: Any, args: Any) -> None:
        # Traced by dynamo inside compiled modules: is_compiling() folds to True there,
        # so the hook is a no-op in every graph (no graph break, nothing counted).
        if self._torch.compiler.is_compiling():
            return
        self._depth += 1
        if self._depth == 1 and id(module) not in self._seen:
            self._seen.add(id(module))
            self._consider(module)

    def _post(self, module: Any, args: Any, output: Any) -> None:
        if self._torch.compiler.is_compiling():
            return
        self._depth = max(0, self._depth - 1)

    def _consider(self, module: Any) -> None:
        name = type(getattr(module, "_orig_mod", module)).__name__
        reason = candidate_reason(module, self._torch)
        if reason == "compiled by the script":
            self.script_compiled.append(name)
            self._notify(module)
            return
        if reason is not None:
            self.skipped.setdefault(name, reason)
            return
        self._notify(module)
        # DDP's own forward does not trace (torch 2.9 broke the graph there and compiled
        # nothing): compile the module it wraps; its gradient hooks stay outside the graph.
        wrapped = _wrapped_by_ddp(module, self._torch)
        if wrapped is not None:
            module, name = wrapped, f"{name}({type(wrapped).__name__})"
        self._compile(module, name)

    def _notify(self, module: Any) -> None:
        if self.on_model is not None:
            inner = getattr(module, "_orig_mod", module)
            self.on_model(inner)

    def _compile(self, module: Any, name: str) -> None:
        entry = CompiledModule(name, sum(p.numel() for p in module.parameters()))
        self.compiled.append(entry)
        entry.call = compile_in_place(
            module, self._torch, self.compile_kwargs, regional=self.regional
        )
        compiled: Callable[..., Any] = entry.call
        if self.fallback_eager:
            compiled = self._guarded(module, compiled, entry)
        # What nn.Module.compile() does, with a frame dynamo traces: compiling
        # module._call_impl itself compiles nothing for modules defined in torch.nn
        # (Sequential, ...), whose frames dynamo skips.
        module._compiled_call_impl = compiled

    def _guarded(
        self, module: Any, compiled: Callable[..., Any], entry: CompiledModule
    ) -> Callable[..., Any]:
        dynamo_error = self._torch._dynamo.exc.TorchDynamoException

        def call(*args: Any, **kwargs: Any) -> Any:
            if entry.failed is not None:
                return module._call_impl(*args, **kwargs)
            try:
                return compiled(*args, **kwargs)
            except dynamo_error as exc:
                # The eager call below raises the script's own error if it was one.
                entry.failed = f"{type(exc).__name__}: {exc}"[:_REASON_CHARS]
                return module._call_impl(*args, **kwargs)

        return call

    # -- report -----------------------------------------------------------------

    def report(self) -> dict[str, Any]:
        """What the hook compiled, what the script compiled, and what it left eager and why."""
        return {
            "modules": [entry.as_dict() for entry in self.compiled],
            "script_compiled": list(self.script_compiled),
            "skipped": dict(self.skipped),
        }
