"""The owner of everything trcomp does in the user's process.

One :class:`Session` per process, made by :func:`trcomp_container.inprocess.start`
when the job set ``TRCOMP_METRICS_DIR``. It holds the process's measurements,
the :class:`.ledger.Ledger` of every change it installs (each with its undo),
dispatches the events (a module imported, an optimizer step, a compile
starting or ending, an uncaught exception, exit) and is the single no-harm
boundary (:meth:`Session.guarded`): an error of trcomp's own is reported,
never raised into the script. At exit it writes this rank's record, then
closes the ledger.
"""

from __future__ import annotations

import atexit
import contextlib
import os
import re
import sys
import time
import traceback
from collections.abc import Callable, Iterator
from types import ModuleType, TracebackType
from typing import Any

from trcomp_container.inprocess import reports, torch_compat
from trcomp_container.inprocess.backward_steps import BACKWARDS_BEFORE_STEPS
from trcomp_container.inprocess.imports import AfterImport
from trcomp_container.inprocess.ledger import Change, Ledger
from trcomp_container.inprocess.record import RankRecord
from trcomp_container.inprocess.settings import Settings
from trcomp_container.inprocess.state import ModuleState
from trcomp_container.inprocess.stepclock import StepClock
from trcomp_container.inprocess.turns import Turns

__all__ = ["ProcessState", "Session", "current"]

_MAX_INTERVALS = 10_000
_TRACEBACK_LINES = 30
_COMPILE_ID = re.compile(r"(\d+)/(\d+)")
_EX_CONFIG = 64  # the entrypoint's exit code for a job it refuses (trcomp_container.failures)
INDUCTOR_CONFIG = "torch._inductor.config"
"""Inductor's settings module: the job's inductor options are applied when it is imported."""

_session: Session | None = None


def current() -> Session | None:
    """This process's session, None when the hook is off."""
    return _session


class ProcessState:
    """Everything this process measured; written once at exit."""

    def __init__(self) -> None:
        self.steps = 0
        self.first_step_s: float | None = None
        self.clock = StepClock(_MAX_INTERVALS)
        self.optimizer_id: int | None = None
        self.compile_s = 0.0
        self.compile_events = 0
        self.recompiles = 0
        self.compile_started: float | None = None
        self.xla_compiles_at_step3: int | None = None
        self.xla_compiles_at_last_step: int | None = None
        self.error: dict[str, Any] | None = None
        self.warnings: list[str] = []
        self.backward_passes = 0
        """Backward passes counted before any optimizer step (:mod:`.backward_steps`)."""
        self.steps_from = "optimizer"
        """``optimizer``: ``steps`` counts the first optimizer's steps; ``backward``: the
        backward passes of a loop that steps no torch.optim optimizer."""


# -- the optimizer step, as dynamo sees it -------------------------------------------
# Module functions, not methods: when the script compiles optimizer.step, dynamo
# traces the step post-hook, which must only call _record_step, made (once dynamo
# is imported) a function dynamo does not trace and moves after the graph.


def _on_optimizer_step(optimizer: Any, args: Any, kwargs: Any) -> None:
    _record_step(id(optimizer))


def _record_step(optimizer_id: int) -> None:
    if _session is not None:
        _session.on_step(optimizer_id)


class Session:
    """The hook in one process: state, ledger, events, the no-harm boundary."""

    def __init__(self, settings: Settings) -> None:
        self.settings = settings
        self.started = time.time()
        self.ledger = Ledger()
        self.state = ProcessState()
        self.turns = Turns.from_env(dict(os.environ))
        """Compiles taken in turn by the ranks of a host (:mod:`.turns`)."""
        self.switch: Any = None  # a switch.Switch once torch is imported in a compiled job
        self.redis_guard: Any = None
        """The :class:`.patches.redis_backend.RedisGuard` once inductor's remote cache is
        imported in a job with a Redis shared cache (its refused values reach the record)."""
        self.stays: list[Change] | None = None
        """What stayed after close (by design); None until closed."""
        self._previous_except_hook = sys.excepthook

    # -- the no-harm boundary -------------------------------------------------------

    @contextlib.contextmanager
    def guarded(self, on_error: Callable[[Exception], None]) -> Iterator[None]:
        """Run trcomp's own code; an error goes to ``on_error``, never to the script.

        The one broad ``except`` of the package's event handling: every event
        handler runs inside it.
        """
        try:
            yield
        except Exception as exc:  # the no-harm boundary (docs/runtime.md)
            with contextlib.suppress(Exception):  # a failing report must not raise either
                on_error(exc)

    def warn(self, message: str) -> None:
        self.state.warnings.append(message)
        print(f"[trcomp] WARNING: {message}", file=sys.stderr, flush=True)

    # -- start ----------------------------------------------------------------------

    def start(self) -> None:
        """Install the import finder, the exception hook and the exit hook; a module imported
        before (a ``.pth`` file's import, a forked process) gets its callback now."""
        global _session
        _session = self
        callbacks = {
            "torch": self._after_torch,
            "torch._dynamo": self._after_dynamo,
            "torch._inductor.codecache": self._after_codecache,
            "torch._inductor.remote_cache": self._after_remote_cache,
            "torch_xla": self._after_torch_xla,
        }
        if self.settings.redis is not None:  # inductor's remote caches: on here, nowhere else
            for module in {where for where, _ in torch_compat.REMOTE_CACHE_FLAGS.values()}:
                callbacks[module] = self._turn_on_remote_caches
        # Inductor's config: the job's options, after the remote-cache flags it holds.
        callbacks[INDUCTOR_CONFIG] = self._after_inductor_config
        finder = AfterImport(callbacks, self._run_import_callback)
        self.ledger.record("sys.meta_path: import finder", finder.install())
        sys.excepthook = self._except_hook
        self.ledger.record("sys.excepthook", self._restore_except_hook)
        atexit.register(self.close)
        self.ledger.keep("atexit: the record", "the record is written at exit")
        finder.run_imported()

    def _run_import_callback(
        self, name: str, callback: Callable[[ModuleType], None], module: ModuleType
    ) -> None:
        def disabled(exc: Exception) -> None:
            print(f"[trcomp] metrics hook disabled for {name}: {exc}", file=sys.stderr)

        with self.guarded(disabled):
            callback(module)

    def _restore_except_hook(self) -> None:
        if sys.excepthook == self._except_hook:
            sys.excepthook = self._previous_except_hook

    # -- imports --------------------------------------------------------------------

    def _after_torch(self, torch: ModuleType) -> None:
        from torch.optim.optimizer import register_optimizer_step_post_hook

        handle = register_optimizer_step_post_hook(_on_optimizer_step)
        self.ledger.record("optimizer step post-hook", handle.remove)
        config = self.settings.config()
        if config is not None and config.enabled:
            from trcomp_container.inprocess.switch import Switch

            self.switch = Switch(
                torch, config, self.settings, self.ledger, on_backward=self.on_backward
            )

    def _after_dynamo(self, dynamo: ModuleType) -> None:
        global _record_step
        plain = _record_step
        # Not traced (disable), and called after the compiled graph instead of
        # breaking it (a reorderable logging function): a compiled optimizer.step
        # keeps its graphs, and the step is still counted and timed.
        disabled = dynamo.disable(plain)
        reorderable = torch_compat.dynamo_config().reorderable_logging_functions
        _record_step = disabled
        reorderable.add(disabled)

        def undo() -> None:
            global _record_step
            reorderable.discard(disabled)
            _record_step = plain

        self.ledger.record("dynamo: the step recorder, reorderable", undo)
        remove = torch_compat.register_compile_callbacks(
            self._on_compile_start, self._on_compile_end
        )
        self.ledger.record("dynamo: compile callbacks", remove)

    def _after_inductor_config(self, config: ModuleType) -> None:
        """The job's inductor options, when inductor's config is first imported: a process
        that never compiles (a data worker, inductor's own helper processes) does not pay
        for importing inductor."""
        if self.settings.redis is not None:
            self._turn_on_remote_caches(config)
        options = self.settings.inductor_options
        if options:
            from trcomp_container.inprocess.patches import inductor

            self.ledger.record("inductor options", inductor.apply_options(options, self.warn))

    def _after_codecache(self, codecache: ModuleType) -> None:
        if self.settings.inductor_cache_dir:
            from trcomp_container.inprocess.patches import inductor

            undo = inductor.move_header_dir(codecache, self.settings.inductor_cache_dir)
            if undo is not None:
                self.ledger.record("inductor: precompiled header folder", undo)

    def _turn_on_remote_caches(self, config: ModuleType) -> None:
        """A Redis shared cache: the job's remote caches whose flags ``config`` holds, on in
        this process only (torch's variables would turn them on in any process, hook or not)."""
        if self.settings.redis is None:
            return
        undo = torch_compat.set_remote_cache_flags(config.__name__, self.settings.redis.caches)
        self.ledger.record(f"{config.__name__}: remote caches on", undo)

    def _after_remote_cache(self, remote_cache: ModuleType) -> None:
        if self.settings.redis is None:
            return
        from trcomp_container.inprocess.patches import redis_backend

        guard = redis_backend.RedisGuard(self.warn, handoff=self.settings.redis)
        undo = redis_backend.install(remote_cache, guard)
        if undo is None:
            self.warn(
                "torch has no RedisRemoteCacheBackend._get/_put: a Redis that stops answering "
                "fails the compile"
            )
        else:
            self.redis_guard = guard
            self.ledger.record("inductor: Redis backend guarded", undo)

    def _after_torch_xla(self, torch_xla: ModuleType) -> None:
        # atexit runs last-registered first: move the record ahead of torch-xla's teardown.
        atexit.unregister(self.close)
        atexit.register(self.close)
        config = self.settings.config()
        if config is None or config.device_kind != "gpu" or config.engine == "torch_xla":
            return
        from trcomp_container.inprocess.patches import xla_device

        reason = xla_device.refusal(config.engine)

        def stop() -> None:
            self.state.error = {"type": "TorchXlaOnGpu", "message": reason, "traceback_tail": ""}
            print(f"[trcomp] {reason}", file=sys.stderr, flush=True)
            raise SystemExit(_EX_CONFIG)

        self.ledger.record("torch-xla: device calls refused", xla_device.install(torch_xla, stop))

    # -- steps and compiles ---------------------------------------------------------

    def on_step(self, optimizer_id: int) -> None:
        """An optimizer step (the post-hook of every optimizer)."""
        state = self.state
        if state.optimizer_id is None:
            state.optimizer_id = optimizer_id
            self._first_optimizer_step()
        elif optimizer_id != state.optimizer_id:
            # Several optimizers (or a wrapper): count the first one's steps only; a script
            # that stops stepping it (a second phase) ends the measurement window.
            if self.switch is not None:
                with self.guarded(self._stop_measuring):
                    self.switch.on_other_optimizer()
            return
        self._step()

    def _first_optimizer_step(self) -> None:
        """The loop steps an optimizer: its steps are the job's, not backward passes."""
        state = self.state
        counted = state.steps_from == "backward"
        if counted:  # a gradient accumulation longer than the backward count's wait
            state.steps, state.first_step_s = 0, None
            state.clock = StepClock(_MAX_INTERVALS)
            state.steps_from = "optimizer"
        if self.switch is not None:
            with self.guarded(self._stop_measuring):
                self.switch.on_first_optimizer_step(counted_backward=counted)

    def on_backward(self) -> None:
        """A backward pass reached the model's parameters (:mod:`.backward_steps`).

        Called inside the autograd engine: never raises. After
        :data:`.backward_steps.BACKWARDS_BEFORE_STEPS` passes and no optimizer step, each
        pass is the loop's step.
        """
        with self.guarded(lambda exc: self.warn(f"backward steps: {type(exc).__name__}: {exc}")):
            state = self.state
            if state.optimizer_id is not None:
                return
            state.backward_passes += 1
            if state.backward_passes <= BACKWARDS_BEFORE_STEPS:
                return
            if state.steps_from != "backward":
                state.steps_from = "backward"
                if self.switch is not None:
                    self.switch.on_backward_step()
            self._step()

    def _step(self) -> None:
        """One step of the job: an optimizer step, or a backward pass of a loop without one."""
        state = self.state
        state.steps += 1
        if state.first_step_s is None:
            state.first_step_s = time.time() - self.started
        state.clock.mark()
        if self.switch is not None:
            with self.guarded(self._stop_measuring):
                self.switch.on_step(state.steps, state.compile_events, state.clock)
        with self.guarded(lambda exc: None):  # torch-xla's counter is optional
            count = reports.xla_compile_count()
            if count is not None:
                if state.steps == 3:
                    state.xla_compiles_at_step3 = count
                state.xla_compiles_at_last_step = count

    def module_states(self) -> list[tuple[str, ModuleState]]:
        """Each module the zero-code path compiled or adopted, with its state now
        (:class:`.state.ModuleState`); empty without a compiled job's switch."""
        if self.switch is None or self.switch.autocompile is None:
            return []
        return [(entry.name, entry.state) for entry in self.switch.autocompile.compiled]

    def _stop_measuring(self, exc: Exception) -> None:
        message = f"the eager/compiled measurement stopped: {type(exc).__name__}: {exc}"
        self.warn(message)
        with self.guarded(lambda _: None):
            self.switch.abandon(message)  # back to compiled, whatever the window was doing

    def _on_compile_start(self, args: Any) -> None:
        with self.guarded(lambda exc: self.warn(f"compile turns off: {exc}")):
            compile_id = getattr(args, "compile_id", None)
            # The host's first rank compiles it first (bounded wait).
            self.turns.begin(None if compile_id is None else str(compile_id))
        self.state.compile_started = time.perf_counter()
        if self.switch is not None:

            def stopped(exc: Exception) -> None:
                self.warn(f"the zero-code hook stopped: {type(exc).__name__}: {exc}")

            with self.guarded(stopped):
                self.switch.before_compile()

    def _on_compile_end(self, args: Any) -> None:
        state = self.state
        if state.compile_started is not None:
            state.compile_s += time.perf_counter() - state.compile_started
            state.compile_started = None
        state.compile_events += 1
        with self.guarded(lambda exc: self.warn(f"compile turns off: {exc}")):
            self.turns.end()
        match = _COMPILE_ID.search(str(getattr(args, "compile_id", "")))
        if match and int(match.group(2)) > 0:
            state.recompiles += 1

    def _except_hook(
        self, kind: type[BaseException], value: BaseException, tb: TracebackType | None
    ) -> None:
        lines = "".join(traceback.format_exception(kind, value, tb)).splitlines()
        self.state.error = {
            "type": kind.__name__,
            "message": str(value),
            "traceback_tail": "\n".join(lines[-_TRACEBACK_LINES:]),
        }
        self._previous_except_hook(kind, value, tb)

    # -- exit -----------------------------------------------------------------------

    def close(self) -> None:
        """Write this rank's record, then undo every change (once)."""
        if self.stays is not None:
            return
        with self.guarded(lambda exc: print(f"[trcomp] no record: {exc}", file=sys.stderr)):
            self._write_record()
        atexit.unregister(self.close)
        self.stays = self.ledger.close()

    def _write_record(self) -> None:
        directory = self.settings.metrics_dir
        state = self.state
        compiled = state.compile_events > 0 or any(
            name in sys.modules for name in ("torch_xla", reports.JAX_ENGINE)
        )
        refused = self.redis_guard is not None and self.redis_guard.refused
        if directory is None or not (
            state.steps or compiled or state.error or state.warnings or refused
        ):
            return
        from trcomp_container.inprocess.recording import build_record

        record: RankRecord = build_record(self)
        record.write(directory)
