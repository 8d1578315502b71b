"""What the start-up hook compiles by itself: the zero-code path for plain PyTorch loops.

A plain loop (no trcomp import, no ``torch.compile``) under ``backend="inductor"``
would otherwise train eager. While the script runs its first optimizer step,
a global module forward pre-hook watches the modules the script calls and
compiles, in place (as ``nn.Module.compile`` does, with the config's mode,
fullgraph and dynamic), each **outermost** module called

- in training mode (``module.training``), with gradients enabled,
- that has parameters with ``requires_grad`` (it is being trained), all of
  them initialized (a lazy module is looked at again once materialized),
- that the script has not compiled itself (``torch.compile(model)``,
  ``model.compile()``, ``trcomp.runtime.compile``, HF Trainer/Accelerate),
- that is not wrapped in ``nn.DataParallel`` (its replicas would all run the
  original module's compiled code).

A module called in ``eval()`` or under ``torch.no_grad()`` (a validation pass
before training) is looked at again at its next call, until the first optimizer
step; a frozen teacher, a loss module without parameters and anything called
inside another module are left as they are. The first step runs eager; the
compiled module runs from its next call. After the first optimizer step (or the
first compile of a module seen here) the hooks are removed, so the steady loop
carries no hook overhead. A compile of anything else (a helper function the
script compiled) does not end the zero-code path.

No harm (docs/runtime.md#the-no-harm-contract): an error inside the hooks
removes them and leaves every module eager, with the reason in the report.
Each compiled module has its own code object, so dynamo's recompile limit
counts per module, and counts the calls it ran eager (recompile limit hit,
frame skipped): the report lists as compiled only what ran compiled at its
last call. :attr:`AutoCompile.eager` makes the hook's modules run eager
(the eager-against-compiled window, or a keep-eager decision) without
touching torch's global compiler stance.

With ``regional=True`` a module's repeated blocks are marked as nested compile
regions first (``trcomp.contract.regions``), where that is known to be correct.

A module whose compilation fails (dynamo cannot trace it, the backend fails)
runs eager from then on when ``fallback="eager"``; the reason is kept for the
summary. With ``fallback="fail"`` the error propagates.

Standard library and ``trcomp.contract`` only at import; torch is imported by the
caller's callbacks.
"""

from __future__ import annotations

import logging
import re
import warnings
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from trcomp_aot import AotCall, unsupported_reason

from trcomp._version import __version__
from trcomp.contract import regions
from trcomp.contract.regions import RegionalCall, compile_in_place

__all__ = ["AutoCompile", "CompiledModule", "candidate_reason", "module_signature"]

# torch.compile(module) warns that global hooks fire an extra time for its wrapper;
# ours are built for that (they skip the wrapper) and only live for the first step.
_GLOBAL_HOOK_WARNING = r"Using `torch.compile\(module\)` when there are global hooks"
_REASON_CHARS = 500
_CODE_NAME = "trcomp_compiled_{}"
_LIMIT_LOG = re.compile(
    r"hit config\.(\w+) \((\d+)\).*?function: '(trcomp_compiled_\d+)'.*?last reason: (.*?)\n",
    re.S,
)
_REENTRANT = (
    "eval mode",
    "called with gradients disabled",
    "uninitialized (lazy) parameters",
)
"""Reasons that may change before the first optimizer step: the module is looked at again."""
MAX_LOOKS = 2000
"""Outermost calls looked at without a trained module before the hooks go (an inference
script never steps an optimizer; the hooks must not slow every module call it makes)."""


@dataclass
class CompiledModule:
    """One module the hook compiled (or tried to), and how its calls ran."""

    name: str
    parameters: int
    failed: str | None = None
    call: RegionalCall | None = None
    calls: int = 0
    """Calls through the compiled code (not counting calls made eager on purpose)."""
    eager_calls: int = 0
    """Of those, calls dynamo ran as plain Python (recompile limit hit, frame skipped)."""
    last_call_eager: bool = False
    limit: str | None = None
    """Dynamo's limit this module hit (``recompile_limit (8): <last reason>``)."""
    recompiled: str | None = None
    """Why the hook compiled the module afresh, if it did."""
    aot: AotCall | None = None
    """Its ahead-of-time artifact (torch >= 2.14, compile cache on), when it may have one."""
    aot_off: str | None = None
    """Why it has none, when the job keeps artifacts."""

    @property
    def ran_aot(self) -> bool:
        """Whether an ahead-of-time artifact ran some of its calls."""
        return self.aot is not None and self.aot.state.calls > 0

    @property
    def regional(self) -> str | None:
        """The repeated blocks compiled once for all layers, e.g. ``"12 x GPT2Block"``."""
        return None if self.call is None else self.call.describe()

    @property
    def ran_compiled(self) -> bool:
        """Whether the module's last call ran compiled code."""
        return self.failed is None and self.calls > 0 and not self.last_call_eager

    def as_dict(self) -> dict[str, Any]:
        return {
            "module": self.name,
            "parameters": self.parameters,
            "failed": self.failed,
            "regional": self.regional,
            "regional_off": None if self.call is None else self.call.unmarked,
            "calls": self.calls,
            "eager_calls": self.eager_calls,
            "ran_compiled": self.ran_compiled,
            "limit": self.limit,
            "recompiled": self.recompiled,
            "aot": self.aot.state.as_dict()
            if self.aot is not None
            else (None if self.aot_off is None else {"path": "off", "reason": self.aot_off}),
        }


def _is_lazy(param: Any, torch: Any) -> bool:
    return bool(torch.nn.parameter.is_lazy(param))


def module_signature(module: Any) -> str:
    """A short description of a module's structure: class name and parameter shapes."""

    def shape(param: Any) -> str:
        # An uninitialized (lazy) parameter has no shape yet.
        if type(param).__name__.startswith("Uninitialized"):
            return "lazy"
        return str(tuple(param.shape))

    shapes = ",".join(
        f"{name}:{shape(param)}:{str(param.dtype).removeprefix('torch.')}"
        for name, param in module.named_parameters()
    )
    return f"{type(module).__qualname__}[{shapes}]"


def candidate_reason(module: Any, torch: Any) -> str | None:
    """Why ``module`` (called at the outermost level) is not compiled; None: compile it."""
    if _script_compiled(module, torch):
        return "compiled by the script"
    if isinstance(module, torch.nn.DataParallel):
        return (
            "wrapped in nn.DataParallel, whose replicas would all run the original module's "
            "compiled code: left eager. Use one process per GPU "
            "(distribution={'torch_distributed': {'enabled': True}}) to compile it"
        )
    if not module.training:
        return "eval mode"
    if not torch.is_grad_enabled():
        return "called with gradients disabled"
    params = list(module.parameters())
    if any(_is_lazy(param, torch) for param in params):
        return "uninitialized (lazy) parameters"
    if not any(param.requires_grad for param in params):
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
    ddp = torch.nn.parallel.DistributedDataParallel
    return module.module if isinstance(module, ddp) else None


class _LimitLog(logging.Filter):
    """Reads dynamo's "hit config.recompile_limit" warnings for the hook's own frames."""

    def __init__(self, owner: AutoCompile) -> None:
        super().__init__()
        self.owner = owner

    def filter(self, record: logging.LogRecord) -> bool:
        try:
            match = _LIMIT_LOG.search(record.getMessage() + "\n")
            if match:
                self.owner.limit_hit(
                    match.group(3), f"{match.group(1)} ({match.group(2)})", match.group(4).strip()
                )
        except Exception:  # a log line must never break the job
            pass
        return True


class AutoCompile:
    """The forward hooks that find and compile the outermost trained modules.

    ``compile_kwargs`` are the ``torch.compile`` arguments the config asks for;
    ``fallback_eager`` says whether a failing compilation falls back to eager;
    ``regional`` whether a module's repeated blocks are marked as regions first.
    ``on_model`` is called with each outermost trained module seen (compiled by
    the hook or by the script) and its call's arguments, e.g. to fingerprint the
    model; ``on_error`` with a message when the hooks stopped over an error of their own.
    ``aot_dir``: where ahead-of-time artifacts are loaded from and saved to
    (:mod:`trcomp_aot`); None: never (the compile cache is off, or ``aot=False``).
    """

    def __init__(
        self,
        torch: Any,
        *,
        compile_kwargs: dict[str, Any],
        fallback_eager: bool,
        regional: bool = False,
        on_model: Callable[[Any, Any], None] | None = None,
        on_error: Callable[[str], None] | None = None,
        aot_dir: Path | None = None,
    ) -> None:
        self._torch = torch
        self.aot_dir = aot_dir
        self.compile_kwargs = compile_kwargs
        self.fallback_eager = fallback_eager
        self.regional = regional
        self.on_model = on_model
        self.on_error = on_error
        self.compiled: list[CompiledModule] = []
        self.skipped: dict[str, str] = {}
        self.script_compiled: list[str] = []
        self.error: str | None = None
        self.eager = False
        """True: the hook's compiled modules run eager (measurement window, keep-eager)."""
        self._depth = 0
        self._looks = 0
        self._seen: set[int] = set()
        self._codes: dict[str, CompiledModule] = {}
        self._handles: list[Any] = []
        self._log_filter = _LimitLog(self)

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
        logging.getLogger("torch._dynamo.convert_frame").addFilter(self._log_filter)

    def remove(self) -> None:
        """Remove the global hooks; modules already compiled stay compiled."""
        for handle in self._handles:
            handle.remove()
        self._handles = []

    @property
    def active(self) -> bool:
        return bool(self._handles)

    @property
    def saw_model(self) -> bool:
        """Whether a trained module was seen (compiled here or by the script)."""
        return bool(self.compiled or self.script_compiled)

    # -- the hooks --------------------------------------------------------------

    def _pre(self, module: Any, args: Any) -> None:
        # Traced by dynamo inside compiled modules: is_compiling() folds to True there,
        # so the hook is a no-op in every graph (no graph break, nothing counted).
        if self._torch.compiler.is_compiling():
            return
        try:
            self._depth += 1
            if self._depth == 1 and id(module) not in self._seen:
                self._consider(module, args)
        except Exception as exc:  # never break the user's script
            self._stop(f"{type(exc).__name__}: {exc}")

    def _post(self, module: Any, args: Any, output: Any) -> None:
        if self._torch.compiler.is_compiling():
            return
        self._depth = max(0, self._depth - 1)

    def _stop(self, message: str) -> None:
        self.error = f"the zero-code hook stopped, modules not yet compiled stay eager: {message}"[
            :_REASON_CHARS
        ]
        self.remove()
        if self.on_error is not None:
            self.on_error(self.error)

    def _consider(self, module: Any, args: Any) -> None:
        if self._torch._C._current_graph_task_id() != -1:
            # Called by autograd (activation checkpointing recomputes a block's forward
            # during backward): not the script calling its model.
            return
        name = type(getattr(module, "_orig_mod", module)).__name__
        reason = candidate_reason(module, self._torch)
        if reason in _REENTRANT:
            self.skipped[name] = reason  # looked at again at its next call
            self._looks += 1
            if self._looks >= MAX_LOOKS and not self.saw_model:
                self.remove()
            return
        self._seen.add(id(module))
        if reason == "compiled by the script":
            self.script_compiled.append(name)
            self.skipped.pop(name, None)
            self._notify(module, args)
            return
        if reason is not None:
            self.skipped.setdefault(name, reason)
            return
        self.skipped.pop(name, None)
        # DDP's own forward does not trace (torch 2.9 broke the graph there and compiled
        # nothing): compile the module it wraps; its gradient hooks stay outside the graph.
        inner = _wrapped_by_ddp(module, self._torch)
        self._notify(inner if inner is not None else module, args)
        if inner is not None:
            module, name = inner, f"{name}({type(inner).__name__})"
        self._compile(module, name)

    def _notify(self, module: Any, args: Any) -> None:
        if self.on_model is not None:
            self.on_model(getattr(module, "_orig_mod", module), args)

    def _compile(self, module: Any, name: str) -> None:
        entry = CompiledModule(name, sum(p.numel() for p in module.parameters()))
        self.compiled.append(entry)
        try:
            entry.call = compile_in_place(
                module,
                self._torch,
                self.compile_kwargs,
                regional=self.regional,
                call=self._traced(module, entry),
            )
        except Exception as exc:
            entry.failed = f"{type(exc).__name__}: {exc}"[:_REASON_CHARS]
            return
        compiled: Callable[..., Any] = entry.call
        if self.aot_dir is not None and not entry.call.groups:
            entry.aot_off = unsupported_reason(self._torch, module, self.compile_kwargs)
            if entry.aot_off is None:
                entry.aot = AotCall(
                    self._torch,
                    module,
                    entry.call,
                    compile_kwargs=self.compile_kwargs,
                    directory=self.aot_dir,
                    trcomp_version=__version__,
                    on_ready=self._aot_ready,
                )
                compiled = entry.aot
        elif self.aot_dir is not None:
            entry.aot_off = "regional compilation: the model is not one ahead-of-time graph"
        # What nn.Module.compile() does, with a frame dynamo traces: compiling
        # module._call_impl itself compiles nothing for modules defined in torch.nn
        # (Sequential, ...), whose frames dynamo skips.
        module._compiled_call_impl = self._guarded(module, compiled, entry)

    def _aot_ready(self) -> None:
        # An artifact loaded or compiled ahead of time: no dynamo compile start to
        # remove the hooks on (Switch.before_compile), so they go here.
        if self.saw_model:
            self.remove()

    @property
    def aot_graphs(self) -> int:
        """Modules that ran an ahead-of-time artifact (graphs dynamo did not count)."""
        return sum(1 for entry in self.compiled if entry.ran_aot)

    def _traced(self, module: Any, entry: CompiledModule) -> Callable[..., Any]:
        """The function dynamo compiles for ``module``: its own code object and name.

        Dynamo keeps compiled entries, and counts its recompile limit, per code
        object: one shared function would make the 9th module compiled run eager.
        """
        is_compiling = self._torch.compiler.is_compiling

        def traced(*args: Any, **kwargs: Any) -> Any:
            if not is_compiling():  # folded to False in compiled code: runs only eager
                entry.eager_calls += 1
                entry.last_call_eager = True
            return module._call_impl(*args, **kwargs)

        code_name = _CODE_NAME.format(len(self._codes))
        self._codes[code_name] = entry
        traced.__code__ = traced.__code__.replace(co_name=code_name)
        return traced

    def _recompiled(self, module: Any, entry: CompiledModule) -> Callable[..., Any]:
        """A fresh compile of ``module`` (whole), for parameters whose requires_grad changed.

        torch 2.9 reuses a graph traced with frozen parameters after they are unfrozen
        (a two-phase fine-tune): no gradients reach them (reproduced with
        ``torch.compile(model)`` alone). A new code object starts a new dynamo entry.
        """
        if entry.call is not None and entry.call.groups:
            regions.unmark_regions(entry.call.groups)
        if entry.aot is not None:
            entry.aot.state.reason = "not used after requires_grad of its parameters changed"
        entry.call = RegionalCall(
            self._torch.compile(self._traced(module, entry), **self.compile_kwargs), [], self._torch
        )
        entry.recompiled = "requires_grad of its parameters changed"
        return entry.call

    def _guarded(
        self, module: Any, compiled: Callable[..., Any], entry: CompiledModule
    ) -> Callable[..., Any]:
        dynamo_error = self._torch._dynamo.exc.TorchDynamoException
        owner = self
        trained = _trained(module)

        def call(*args: Any, **kwargs: Any) -> Any:
            nonlocal compiled, trained
            # torch.jit.trace of the model (an export after training) records eager ops.
            if entry.failed is not None or owner.eager or owner._torch.jit.is_tracing():
                return module._call_impl(*args, **kwargs)
            now = _trained(module)
            if now != trained:
                trained, compiled = now, owner._recompiled(module, entry)
            entry.calls += 1
            entry.last_call_eager = False
            saved = _snapshot(module, owner._torch) if entry.calls <= 3 else None
            # The module's own pre-hook does not run on this path (nn.Module calls
            # _compiled_call_impl instead of _call_impl): count the call as the outermost
            # one, so what the compiled code calls is not taken for the script's model
            # (torch 2.14's aot_eager runs the graph as an fx GraphModule, grad disabled).
            owner._depth += 1
            try:
                return compiled(*args, **kwargs)
            except dynamo_error as exc:
                if not owner.fallback_eager:
                    raise
                # The eager call below raises the script's own error if it was one.
                entry.failed = f"{type(exc).__name__}: {exc}"[:_REASON_CHARS]
                if saved is not None:
                    _restore(module, owner._torch, saved)
            finally:
                owner._depth = max(0, owner._depth - 1)
            return module._call_impl(*args, **kwargs)

        return call

    def limit_hit(self, code_name: str, limit: str, reason: str) -> None:
        """Dynamo stopped compiling one of the hook's modules (a limit): note which and why."""
        entry = self._codes.get(code_name)
        if entry is not None and entry.limit is None:
            entry.limit = f"{limit}: {reason}"[:_REASON_CHARS]

    # -- report -----------------------------------------------------------------

    def report(self, graphs: int | None = None) -> dict[str, Any]:
        """What the hook compiled, what the script compiled, and what it left eager and why.

        ``graphs``: the graphs dynamo compiled in the process; with none, no module
        ran compiled code (dynamo broke every graph), whatever its calls say.
        """
        modules = [entry.as_dict() for entry in self.compiled]
        if graphs == 0:
            for entry, module in zip(self.compiled, modules, strict=True):
                module["ran_compiled"] = module["ran_compiled"] and entry.ran_aot
        return {
            "modules": modules,
            "script_compiled": list(self.script_compiled),
            "skipped": dict(self.skipped),
            "error": self.error,
        }


def _trained(module: Any) -> tuple[bool, ...]:
    """Which of the module's parameters require gradients (compared at each call)."""
    return tuple(param.requires_grad for param in module.parameters())


def _snapshot(module: Any, torch: Any) -> tuple[list[Any], Any]:
    """The module's buffers and the CPU random state, so a failed compile can be undone.

    A compile that fails after a graph break may already have run the forward's
    first part (BatchNorm's running statistics updated); the eager re-run must
    start from the same state.
    """
    with torch.no_grad():
        buffers = [buffer.detach().clone() for buffer in module.buffers()]
    return buffers, torch.random.get_rng_state()


def _restore(module: Any, torch: Any, saved: tuple[list[Any], Any]) -> None:
    buffers, rng = saved
    with torch.no_grad():
        for buffer, value in zip(module.buffers(), buffers, strict=False):
            buffer.copy_(value)
    torch.random.set_rng_state(rng)
