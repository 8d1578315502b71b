"""What the start-up hook compiles by itself: the zero-code path for plain PyTorch loops.

A plain loop (no trcomp import, no ``torch.compile``) under ``backend="inductor"``
would otherwise train eager. While the script runs its first optimizer step,
a global module forward pre-hook watches the modules the script calls and
compiles, in place (as ``nn.Module.compile`` does, with the config's mode,
fullgraph and dynamic), each **outermost** module called that
:func:`.policy.candidate_reason` accepts.

A module called in ``eval()`` or under ``torch.no_grad()`` (a validation pass
before training) is looked at again at its next call, until the first optimizer
step; a frozen teacher, a loss module without parameters and anything called
inside another module are left as they are. The first step runs eager; the
compiled module runs from its next call. The search ends (the global hooks go,
in :meth:`AutoCompile.end_search` alone) at the first optimizer step, at the
first compile once a trained module was seen, when an ahead-of-time artifact is
ready, on an error of the hooks, or after :data:`MAX_LOOKS` calls without a
trained module; a compile of anything else (a helper the script compiled) does
not end it.

No harm (docs/runtime.md#the-no-harm-contract): an error inside the hooks
ends the search and leaves every module not yet compiled eager, with the
reason in the report. Each compiled module has its own code object, so
dynamo's recompile limit counts per module, and counts the calls it ran eager
(recompile limit hit, frame skipped): the report lists as compiled only what
ran compiled at its last call. :class:`.eager.EagerMode` makes the hook's
modules run eager (the eager-against-compiled window, or a keep-eager decision)
without touching torch's global compiler stance.

With ``regional=True`` a module's repeated blocks are marked as nested compile
regions first (``trcomp.runtime.regions``), where that is known to be correct.

A module whose compilation fails (dynamo cannot trace it, the backend fails)
runs eager from then on when ``fallback="eager"``; the reason is kept for the
summary. With ``fallback="fail"`` the error propagates.

Every change to the process (the global hooks, the warning and log filters,
each module's compiled call) is recorded with its undo in the session's ledger.
Standard library only at import; torch is passed in.
"""

from __future__ import annotations

import functools
import logging
import warnings
from collections.abc import Callable
from pathlib import Path
from typing import Any

from trcomp._version import __version__
from trcomp.runtime import regions
from trcomp.runtime.regions import RegionalCall, compile_in_place
from trcomp_container.inprocess import fsdp, torch_compat
from trcomp_container.inprocess.aot import AotCall, unsupported_reason
from trcomp_container.inprocess.calls import MAX_CHECKED_CALLS, adopt, guarded_call, traced_call
from trcomp_container.inprocess.compiled import (
    CODE_NAME,
    LIMIT_LOGGER,
    REASON_CHARS,
    CompiledModule,
    LimitLog,
)
from trcomp_container.inprocess.eager import EagerMode
from trcomp_container.inprocess.graphcheck import checked_kwargs
from trcomp_container.inprocess.ledger import Ledger
from trcomp_container.inprocess.policy import (
    REENTRANT,
    SCRIPT_COMPILED,
    candidate_reason,
    wrapped_by_ddp,
)
from trcomp_container.inprocess.unrolled import Census, loop_reason
from trcomp_container.inprocess.verify import agree_verdicts

__all__ = ["MAX_CHECKED_CALLS", "MAX_LOOKS", "AutoCompile"]

# torch.compile(module) warns that global hooks fire an extra time for its wrapper;
# ours are built for that (they skip the wrapper) and only live for the first step.
_GLOBAL_HOOK_WARNING = r"Using `torch.compile\(module\)` when there are global hooks"
_HOOKS = "autocompile: global module forward hooks"
MAX_LOOKS = 2000
"""Outermost calls looked at without a trained module before the hooks go (an inference
script never steps an optimizer; the hooks must not slow every module call it makes)."""


class AutoCompile:
    """The forward hooks that find and compile the outermost trained modules.

    ``compile_kwargs`` are the ``torch.compile`` arguments the config asks for;
    ``fallback_eager`` says whether a failing compilation falls back to eager;
    ``regional`` whether a module's repeated blocks are marked as regions first.
    ``on_model`` is called with each outermost trained module seen (compiled by
    the hook or by the script) and its call's arguments, e.g. to fingerprint the
    model; ``on_error`` with a message when the hooks stopped over an error of their own.
    ``aot_dir``: where ahead-of-time artifacts are loaded from and saved to
    (:mod:`.aot`); None: never (the compile cache is off, or ``aot=False``).
    ``verify``: check each compiled module against eager on its first compiled step
    (:mod:`.verify`; ``compare_random``: its random stream too).
    ``mode`` says when the hook's compiled modules run eager; ``ledger`` records each
    change to the process (a fresh one when not given: tests).
    """

    def __init__(
        self,
        torch: Any,
        *,
        ledger: Ledger | None = None,
        mode: EagerMode | None = None,
        compile_kwargs: dict[str, Any],
        fallback_eager: bool,
        regional: bool = False,
        on_model: Callable[[Any, Any], None] | None = None,
        on_error: Callable[[str], None] | None = None,
        aot_dir: Path | None = None,
        verify: bool = False,
        compare_random: bool = True,
    ) -> None:
        self.torch = torch
        self._ledger = ledger if ledger is not None else Ledger()
        self.mode = mode if mode is not None else EagerMode(torch, self._ledger)
        self.aot_dir = aot_dir
        self.verify = verify
        self.compare_random = compare_random
        self.compile_kwargs = compile_kwargs
        self.fallback_eager = fallback_eager
        self.regional = regional
        self.on_model = on_model
        self.on_error = on_error
        self.compiled: list[CompiledModule] = []
        self.superseded: list[str] = []
        """Submodules compiled first, then compiled as part of the outermost module."""
        self._modules: dict[int, CompiledModule] = {}
        self._objects: dict[int, Any] = {}
        """Each entry's module (by the entry's id)."""
        self._census: tuple[Census, list[CompiledModule]] | None = None
        """Calls counted during the first (eager) call of the modules just compiled."""
        self.running: CompiledModule | None = None
        """The module whose compiled call is running (a limit hit in a frame it calls)."""
        self.adopted: set[int] = set()
        """Models compiled through ``trcomp.runtime.compile``, checked here (:meth:`adopt`)."""
        self.skipped: dict[str, str] = {}
        self.script_compiled: list[str] = []
        self.error: str | None = None
        self.active = False
        self.depth = 0
        self._looks = 0
        self._seen: set[int] = set()
        self.codes: dict[str, CompiledModule] = {}
        self._rounds = 0
        self._block_forward: dict[Any, Callable[..., Any]] = {}
        """FSDP2 blocks: one compiled forward per block class (:func:`.fsdp.shared_forward`)."""
        self.steps = 0
        """Optimizer steps of the job's first optimizer seen so far."""

    @functools.cached_property
    def torch_kwargs(self) -> dict[str, Any]:
        """What the hook passes to ``torch.compile``: with ``verify``, the configured backend
        wrapped in the graph check (:mod:`.graphcheck`). Built at the first compile: building
        inductor's backend imports inductor, which a process that never compiles (a data
        worker, inductor's own helper processes) should not pay for."""
        return checked_kwargs(self, self.compile_kwargs) if self.verify else self.compile_kwargs

    # -- lifetime ---------------------------------------------------------------

    def install(self) -> None:
        """Register the global hooks (until :meth:`end_search`) and the log filters."""
        from torch.nn.modules.module import (
            register_module_forward_hook,
            register_module_forward_pre_hook,
        )

        ledger = self._ledger
        warnings.filterwarnings("ignore", message=_GLOBAL_HOOK_WARNING)
        entry = warnings.filters[0]
        ledger.record("autocompile: warning filter (global hooks)", lambda: _drop_filter(entry))
        log_filter = LimitLog(self.limit_hit)
        logger = logging.getLogger(LIMIT_LOGGER)
        logger.addFilter(log_filter)
        ledger.record(
            "autocompile: recompile-limit log filter", lambda: logger.removeFilter(log_filter)
        )
        handles = [
            register_module_forward_pre_hook(self._pre),
            register_module_forward_hook(self._post, always_call=True),
        ]
        self.active = True

        def remove() -> None:
            for handle in handles:
                handle.remove()
            self.active = False

        ledger.record(_HOOKS, remove)
        if self.verify:
            from trcomp import runtime

            ledger.record(
                "autocompile: watching trcomp.runtime.compile", runtime.watch_compiles(self.adopt)
            )
            from trcomp_container.inprocess import accelerate_compile

            ledger.record(
                "autocompile: watching Accelerate's torch.compile (ACCELERATE_DYNAMO_BACKEND)",
                accelerate_compile.watch(self.torch, self.adopt_from_accelerate),
            )
        aot_scope = self.aot_dir is not None
        if aot_scope:
            from trcomp_container.inprocess.aot import keep_scope

            ledger.record("aot: globals added to the artifacts' scope", keep_scope())

    def adopt(self, optimized: Any) -> None:
        """A model compiled through ``trcomp.runtime.compile``: checked like the hook's own."""
        try:
            adopt(self, optimized)
        except Exception as exc:  # the no-harm boundary of trcomp.runtime.compile's watcher
            self.error = (
                f"could not check a trcomp.runtime.compile model: {type(exc).__name__}: {exc}"
            )

    def adopt_from_accelerate(self, optimized: Any) -> None:
        """A model Accelerate compiled because trcomp set ``ACCELERATE_DYNAMO_BACKEND``:
        checked like the hook's own, filed as trcomp's (:mod:`.accelerate_compile`)."""
        from trcomp_container.inprocess.accelerate_compile import BY_ACCELERATE

        try:
            adopt(self, optimized, by=BY_ACCELERATE)
        except Exception as exc:  # the no-harm boundary of the torch.compile wrapper
            self.error = f"could not check Accelerate's compile: {type(exc).__name__}: {exc}"

    def end_search(self) -> None:
        """Remove the global hooks; modules already compiled stay compiled."""
        if self.active:
            self._ledger.undo(_HOOKS)
        self._count_done()

    def remember(self, entry: CompiledModule, module: Any) -> None:
        """Keep ``entry``'s module (:meth:`module_of`)."""
        self._objects[id(entry)] = module

    def module_of(self, entry: CompiledModule) -> Any:
        """The module ``entry`` stands for; None when not known."""
        return self._objects.get(id(entry))

    @property
    def sole_entry(self) -> CompiledModule | None:
        """The one module compiled, when there is exactly one (a graph compiled outside
        any module's call, as a recomputation in backward, belongs to it)."""
        return self.compiled[0] if len(self.compiled) == 1 else None

    def double_backward(self, entry: CompiledModule) -> None:
        """A backward with ``create_graph=True`` went through ``entry``'s compiled graphs:
        that step got eager's gradients (:mod:`.regionfn`), and it runs eager from now on,
        which costs less than recomputing at every such backward."""
        entry.double_backwards += 1
        if entry.failed is None:
            entry.failed = (
                "a backward through it with create_graph=True (a gradient penalty or "
                "higher-order gradients): torch's compiled backward cannot build that graph; "
                "the step's gradients were recomputed eagerly and it runs eager from then on"
            )

    @property
    def ranks(self) -> int:
        """The job's ranks, as torch.distributed knows them (1 before it is set up)."""
        dist = self.torch.distributed
        return int(dist.get_world_size()) if dist.is_available() and dist.is_initialized() else 1

    @property
    def saw_model(self) -> bool:
        """Whether a trained module was seen (compiled here or by the script)."""
        return bool(self.compiled or self.script_compiled)

    # -- events -----------------------------------------------------------------

    def on_step(self) -> None:
        """An optimizer step of the job's first optimizer: the search is over, and the
        modules checked during the step get their verdict."""
        self.end_search()
        self.steps += 1
        self.conclude(whole_step=True)

    def conclude(self, *, whole_step: bool = False) -> None:
        """The verdict of every module whose check covered a whole step (the ranks agree).

        A round runs from the module's first checked call to the end of the first step
        that began after it, so every call site of a step is seen (a gradient penalty
        may call the model first, before the check began). ``whole_step=False``:
        every module being checked, now (a loop that steps no optimizer).
        """
        checked = [
            entry
            for entry in self.compiled
            if entry.checking
            and entry.verdicts
            and (not whole_step or (entry.check_started or 0) < self.steps - 1)
        ]
        for entry in self.compiled:
            if entry.checking and not entry.verdicts and entry.calls and whole_step:
                entry.checking = False  # a whole step ran none of its graphs: none to check
        if not checked:
            return
        local = [next((v.problem for v in e.verdicts if v.problem), None) for e in checked]
        problems = agree_verdicts(local, self._rounds)
        self._rounds += 1
        for entry, problem in zip(checked, problems, strict=True):
            entry.checking = False
            entry.verdicts = []
            entry.check_started = None
            entry.checked_calls = 0
            entry.verified = problem is None
            if problem is not None:
                entry.failed = f"verification: {problem}"[:REASON_CHARS]

    def on_compile_start(self) -> None:
        """Dynamo starts compiling: once a trained module was seen, the global hooks go.

        A graph traced while they are registered would guard on their number and
        compile again once they are removed. A compile before any trained module
        was seen (a helper the script compiled) leaves them: the model is still to come.
        """
        if self.saw_model:
            self.end_search()

    def _aot_ready(self) -> None:
        # An artifact loaded or compiled ahead of time: no dynamo compile start.
        self.on_compile_start()

    # -- the hooks --------------------------------------------------------------

    def _pre(self, module: Any, args: Any) -> None:
        # Traced by dynamo inside compiled modules: is_compiling() folds to True there,
        # so the hook is a no-op in every graph (no graph break, nothing counted).
        if self.torch.compiler.is_compiling():
            return
        try:
            self.depth += 1
            if self.depth == 1 and id(module) not in self._seen:
                self._consider(module, args)
            elif self._census is not None:
                self._census[0].count(module)
        except Exception as exc:  # the hooks' no-harm boundary: never break the script
            self._stop(f"{type(exc).__name__}: {exc}")

    def _post(self, module: Any, args: Any, output: Any) -> None:
        if self.torch.compiler.is_compiling():
            return
        self.depth = max(0, self.depth - 1)
        if self.depth == 0:
            self._count_done()

    def _count_done(self) -> None:
        """The first call of the modules just compiled ended: any loop it unrolls?"""
        if self._census is None:
            return
        census, entries = self._census
        self._census = None
        for entry in entries:
            module = self.module_of(entry)
            reason = None if module is None else loop_reason(module, census)
            if reason is not None and entry.failed is None:
                # Never traced: its next call runs eager (guarded_call reads `failed`).
                entry.failed = f"verification: {reason}"[:REASON_CHARS]
                entry.verified, entry.checking = False, False

    def _stop(self, message: str) -> None:
        self.error = f"the zero-code hook stopped, modules not yet compiled stay eager: {message}"[
            :REASON_CHARS
        ]
        self.end_search()
        if self.on_error is not None:
            self.on_error(self.error)

    def _consider(self, module: Any, args: Any) -> None:
        if torch_compat.current_graph_task_id() != -1:
            # Called by autograd (activation checkpointing recomputes a block's forward
            # during backward): not the script calling its model.
            return
        name = type(getattr(module, "_orig_mod", module)).__name__
        ours = frozenset(self._modules)
        reason = candidate_reason(module, self.torch, ours)
        if reason in REENTRANT:
            self.skipped[name] = reason  # looked at again at its next call
            self._looks += 1
            if self._looks >= MAX_LOOKS and not self.saw_model:
                self.end_search()
            return
        self._seen.add(id(module))
        if reason == SCRIPT_COMPILED and any(id(sub) in self.adopted for sub in module.modules()):
            self._notify(module, args)  # compiled through trcomp.runtime, checked by adopt
            return
        if reason == SCRIPT_COMPILED:
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
        inner = wrapped_by_ddp(module, self.torch)
        self._notify(inner if inner is not None else module, args)
        if inner is not None:
            module, name = inner, f"{name}({type(inner).__name__})"
        self._supersede(module)
        first = len(self.compiled)
        sharded = fsdp.blocks(module)
        for path, block in sharded:
            self._compile_block(block, f"{name}.{path}", name)
        if not sharded:
            self._compile(module, name)
        if self.verify:  # this call runs eager: count what it calls (:mod:`.unrolled`)
            self._census = (Census(), self.compiled[first:])

    def _supersede(self, module: Any) -> None:
        """Take back the hook's compile of submodules of ``module``: the trained model is the
        outermost module, and a part called on its own first (a dry run in ``__init__``, a
        parametrization) was taken for it."""
        for sub in module.modules():
            entry = self._modules.pop(id(sub), None)
            if entry is None or sub is module:
                continue
            self._ledger.undo(_call_change(entry, sub))
            self.compiled.remove(entry)
            self.superseded.append(entry.name)

    def _notify(self, module: Any, args: Any) -> None:
        if self.on_model is not None:
            self.on_model(getattr(module, "_orig_mod", module), args)

    # -- compiling one module ---------------------------------------------------

    def _compile(self, module: Any, name: str) -> None:
        entry = CompiledModule(name, sum(p.numel() for p in module.parameters()))
        self.compiled.append(entry)
        self.remember(entry, module)
        try:
            entry.call = compile_in_place(
                module,
                self.torch,
                self.compile_kwargs,
                regional=self.regional,
                call=traced_call(self, module, entry),
                compile_with=self.torch_kwargs,
            )
        except Exception as exc:  # any compile-setup error: the module stays eager, named
            entry.failed = f"{type(exc).__name__}: {exc}"[:REASON_CHARS]
            return
        if entry.call.groups:
            groups = entry.call.groups
            self._ledger.record(
                f"autocompile: regions of {name}", lambda: regions.unmark_regions(groups)
            )
        compiled: Callable[..., Any] = entry.call
        if self.aot_dir is not None and not entry.call.groups:
            entry.aot_off = unsupported_reason(self.torch, module, self.compile_kwargs)
            if entry.aot_off is None:
                entry.aot = AotCall(
                    self.torch,
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
        entry.checking = self.verify
        before = torch_compat.compiled_call_impl(module)
        torch_compat.set_compiled_call_impl(module, self._guarded(module, compiled, entry))
        self._modules[id(module)] = entry
        self._ledger.record(
            _call_change(entry, module),
            lambda: torch_compat.set_compiled_call_impl(module, before),
        )

    def _compile_block(self, block: Any, name: str, model: str) -> None:
        """Compile an FSDP2 block's ``forward`` in place (:mod:`.fsdp`): FSDP's hooks run eager
        around it, and every block of its class shares one traced function."""
        entry = CompiledModule(name, sum(p.numel() for p in block.parameters()), block_of=model)
        entry.eager = block.forward  # the class's, or one the script set on the instance
        self.compiled.append(entry)
        self.remember(entry, block)
        cls = type(block)
        try:
            if "forward" in vars(block):  # the script's own forward on this one block
                traced = traced_call(self, block, entry)
                compiled = self.torch.compile(traced, **self.torch_kwargs)
            else:
                if cls not in self._block_forward:
                    code_name = CODE_NAME.format(len(self.codes))
                    self.codes[code_name] = entry
                    self._block_forward[cls] = fsdp.shared_forward(
                        self.torch, cls, code_name, self._block_ran_eager, self.torch_kwargs
                    )
                compiled = functools.partial(self._block_forward[cls], block)
        except Exception as exc:  # any compile-setup error: the block stays eager, named
            entry.failed = f"{type(exc).__name__}: {exc}"[:REASON_CHARS]
            return
        entry.call = RegionalCall(compiled, [], self.torch)
        if self.aot_dir is not None:
            entry.aot_off = "an FSDP2 block, compiled inside FSDP's hooks: no ahead-of-time graph"
        entry.checking = self.verify
        own = vars(block).get("forward")
        block.forward = self._guarded(block, entry.call, entry)
        self._modules[id(block)] = entry

        def undo() -> None:
            if own is None:
                vars(block).pop("forward", None)
            else:
                block.forward = own

        self._ledger.record(_call_change(entry, block), undo)

    def _block_ran_eager(self, block: Any) -> None:
        entry = self._modules.get(id(block))
        if entry is not None:
            entry.eager_calls += 1
            entry.last_call_eager = True

    @property
    def aot_graphs(self) -> int:
        """Modules that ran an ahead-of-time artifact (graphs dynamo did not count)."""
        return sum(1 for entry in self.compiled if entry.ran_aot)

    def _guarded(
        self, module: Any, compiled: Callable[..., Any], entry: CompiledModule
    ) -> Callable[..., Any]:
        return guarded_call(self, module, compiled, entry)

    def limit_hit(self, code_name: str, limit: str, reason: str, where: str = "") -> None:
        """Dynamo stopped compiling a frame (a limit): note which module and why.

        One of the hook's own frames, or any frame a compiled module's call runs
        (a forward hook of the script's, resumed after a graph break).
        """
        entry = self.codes.get(code_name) or self.running
        if entry is not None and entry.limit is None:
            frame = "" if code_name in self.codes else f" in {code_name} ({where})"
            entry.limit = " ".join(f"{limit}{frame}: {reason}".split())[:REASON_CHARS]

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


def _call_change(entry: CompiledModule, module: Any) -> str:
    """The ledger's name for the compiled call the hook gave ``module``."""
    return f"autocompile: compiled call of {entry.name} ({id(module):x})"


def _drop_filter(entry: Any) -> None:
    """Remove one entry of the warning filters (what ``filterwarnings`` added)."""
    filters: Any = warnings.filters  # a list at run time (typeshed says Sequence)
    if entry in filters:
        filters.remove(entry)
        # What filterwarnings() itself calls after a change (Python 3.10 to 3.12).
        getattr(warnings, "_filters_mutated", lambda: None)()
