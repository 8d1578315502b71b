"""The one switch inside the training process: what to compile, and whether compiling pays.

Glue between the session's events, the compile policy (:mod:`.autocompile`)
and the eager-against-compiled measurement (:mod:`.speedup`). It acts only
under the inductor backend; for the XLA engines it records why no eager
comparison is possible in the same process.
"""

from __future__ import annotations

import contextlib
import statistics
import sys
from collections.abc import Callable
from dataclasses import replace
from typing import Any

from trcomp_container.inprocess import torch_compat
from trcomp_container.inprocess.aot import AOT_DIR
from trcomp_container.inprocess.autocompile import AutoCompile
from trcomp_container.inprocess.backward_steps import BACKWARDS_BEFORE_STEPS, BackwardSteps
from trcomp_container.inprocess.eager import EagerMode
from trcomp_container.inprocess.ledger import Ledger
from trcomp_container.inprocess.settings import Settings
from trcomp_container.inprocess.speedup.exchange import exchange
from trcomp_container.inprocess.speedup.key import decision_key, module_signature
from trcomp_container.inprocess.speedup.rule import (
    REMEASURE_AFTER,
    Decision,
    agree,
    decide,
    memory_too_close,
    pooled,
)
from trcomp_container.inprocess.speedup.store import STORE_FILE, DecisionStore
from trcomp_container.inprocess.speedup.window import Measurement, SpeedupProbe, step_times
from trcomp_container.inprocess.state import ModuleState, all_eager_by_verdict, ran_compiled

__all__ = ["NO_EAGER_IN_PROCESS", "Switch"]

NO_EAGER_IN_PROCESS = {
    "torch_xla": "torch-xla traces lazily on its own device: the same process cannot run "
    "the model eager for comparison",
    "jax": "the jax engine runs compile_step as XLA programs; torchax's eager mode is "
    "op by op, not the eager PyTorch the job would otherwise run",
}
_OTHER_OPTIMIZER_STEPS = 8  # steps of other optimizers in a row: the script changed phase


class Switch:
    """Created when torch is imported in a compiled job; fed every optimizer step."""

    def __init__(
        self,
        torch: Any,
        config: Any,
        settings: Settings,
        ledger: Ledger | None = None,
        on_backward: Callable[[], None] | None = None,
    ) -> None:
        self._torch = torch
        self.config = config
        self.settings = settings
        self.ledger = ledger if ledger is not None else Ledger()
        self.engine = config.engine if config.enabled else None
        self.mode = EagerMode(torch, self.ledger)
        self.autocompile: AutoCompile | None = None
        self.probe: SpeedupProbe | None = None
        self.decision: Decision | None = None
        self.warnings: list[str] = []
        self._model_signature: str | None = None
        self._key: str | None = None
        self._other_steps = 0
        self._model_id: int | None = None
        self._calls_before: dict[int, int] = {}
        """Compiled calls of each hook module at the last step (what the step ran)."""
        self._rounds: list[list[float]] = []
        """Each noisy round's agreed ``[eager, compiled_first, compiled_again]`` medians."""
        self.steps_from = "optimizer"
        """What the steps the switch is fed are: ``optimizer`` steps, or ``backward``
        passes of a loop that steps no torch.optim optimizer (:mod:`.backward_steps`)."""
        self.backward_steps: BackwardSteps | None = None
        if on_backward is not None and str(settings.world_size) in ("", "1"):
            # One rank only: the step's work (the measurement's exchange, the checks'
            # agreement) would run inside the autograd engine beside DDP's collectives.
            self.backward_steps = BackwardSteps(self.ledger, on_backward)
        cache = settings.cache_dir
        self.store = DecisionStore(cache / STORE_FILE) if cache else None
        if self.engine != "inductor":
            return
        if config.measure_speedup:
            self.probe = SpeedupProbe()
        if config.auto_compile:
            # getattr: a RuntimeConfig written by an older trcomp has no aot field.
            keep_aot = cache is not None and getattr(config, "aot", True)
            self.autocompile = AutoCompile(
                torch,
                ledger=self.ledger,
                mode=self.mode,
                compile_kwargs=config.compile_kwargs(),
                fallback_eager=config.fallback == "eager",
                regional=config.compiles_regionally,
                on_model=self._on_model,
                on_error=self.warnings.append,
                aot_dir=cache / AOT_DIR if keep_aot and cache is not None else None,
                # getattr: a RuntimeConfig written by an older trcomp has neither field.
                verify=getattr(config, "verify", True),
                compare_random=not getattr(config, "fast_random", False),
            )
            self.autocompile.install()

    # -- the model --------------------------------------------------------------

    def _on_model(self, module: Any, args: Any) -> None:
        if self._model_signature is not None and not self._contains_model(module):
            return
        if self.backward_steps is not None and self.probe is not None:
            self.backward_steps.watch(module)
        self._model_id = id(module)
        self._model_signature = module_signature(module)
        self._key = decision_key(
            self._torch,
            signature=self._model_signature,
            args=args,
            config=self.config,
            world_size=self.settings.world_size,
        )
        loaded = self.store.load(self._key) if self.store is not None else None
        if loaded is None or self.probe is None:
            return
        stored, uses = loaded
        if uses >= REMEASURE_AFTER:
            return  # measured again by this job, stored afresh
        if self.store is not None and self.settings.rank == 0:
            # The count of uses is advice; the decision still applies.
            with contextlib.suppress(OSError):
                self.store.save(self._key, stored, uses=uses + 1)
        # Measured by an earlier job of this lineage on the same model, inputs and versions.
        self.decision = stored
        self.probe.use_stored()
        if stored.keep == "eager":
            self._set_eager(True)

    def _contains_model(self, module: Any) -> bool:
        """Whether ``module`` holds the module keyed so far (a part called first): the
        decision is then keyed by the whole model."""
        return self._model_id != id(module) and any(
            id(sub) == self._model_id for sub in module.modules()
        )

    # -- events -----------------------------------------------------------------

    def before_compile(self) -> None:
        """Dynamo starts compiling."""
        if self.autocompile is not None:
            self.autocompile.on_compile_start()

    def on_other_optimizer(self) -> None:
        """Another optimizer than the job's first stepped (GAN, or a second phase)."""
        self._other_steps += 1
        if self._other_steps < _OTHER_OPTIMIZER_STEPS or self.probe is None:
            return
        if self.probe.measuring or (self.probe.phase == "warmup" and self.decision is None):
            self.probe.abandon(
                "the script stopped stepping its first optimizer (a second phase or another "
                "optimizer): the measurement was abandoned and the job kept compiling"
            )
            self._set_eager(False)

    def on_step(self, step: int, compile_events: int, clock: Any) -> None:
        """After optimizer step ``step`` (1-based) of the job's first optimizer."""
        self._other_steps = 0
        measuring = self.probe is not None and not self.probe.done
        # Before the step's checks conclude: a step that checked a module is not clean.
        ran_compiled = self._step_ran_compiled() if measuring else False
        if self.autocompile is not None:
            self.autocompile.on_step()
        if self.probe is None or self.probe.done:
            return

        def finish(measurement: Measurement) -> str | None:
            return self._finish(measurement, clock)

        kept_eager = self._all_eager_by_verdict()
        if kept_eager is not None:
            self.probe.abandon(kept_eager)
            self._set_eager(False)
            return
        switch = self.probe.on_step(step, compile_events, finish, compiled=ran_compiled)
        if switch == "eager":
            skip = _memory_reason(self._torch)
            if skip is not None:
                self.probe.abandon(skip)
                return
        if switch is not None:
            self._set_eager(switch == "eager")

    def on_first_optimizer_step(self, *, counted_backward: bool) -> None:
        """The script stepped an optimizer for the first time: its steps are the job's.

        ``counted_backward``: backward passes were counted as steps until now (a
        gradient accumulation longer than :data:`.backward_steps.BACKWARDS_BEFORE_STEPS`):
        a measurement they began starts again on optimizer steps.
        """
        if self.backward_steps is not None:
            self.backward_steps.stop()
        self.steps_from = "optimizer"
        if counted_backward and self.decision is None and self.probe is not None:
            self.probe = SpeedupProbe()
            self._rounds = []
            self._calls_before = {}
            self._set_eager(False)

    def on_backward_step(self) -> None:
        """Backward passes are the loop's steps from now on (no optimizer stepped)."""
        self.steps_from = "backward"

    def abandon(self, reason: str) -> None:
        """Stop the measurement and run compiled (an error in the measurement)."""
        if self.probe is not None:
            self.probe.abandon(reason)
        self._set_eager(False)

    def _finish(self, measurement: Measurement, clock: Any) -> str | None:
        assert self.probe is not None
        local: list[float] | None = None
        problem = self.probe.usable()
        if problem is None:
            intervals = clock.intervals()  # one synchronization on a GPU
            eager = step_times(intervals, measurement.eager_steps)
            first = step_times(intervals, measurement.compiled_first)
            again = step_times(intervals, measurement.compiled_again)
            if eager and first and again:
                local = [statistics.median(x) for x in (eager, first, again)]
            else:
                problem = "the step clock kept too few intervals"
        figures = agree(exchange(local))  # every rank gets the same figures, or none
        if isinstance(figures, str):
            if self.probe.can_restart:
                self.probe.restart()  # every rank alike: a longer window, compiled now
                return "compiled"
            self.probe.not_measured = problem or figures
            return "compiled"
        eager_s, first_s, again_s = figures
        keep_faster = self.config.keeps_faster
        decision = decide([eager_s], [first_s], compiled_again=[again_s], keep_faster=keep_faster)
        if decision.noisy:
            self._rounds.append([eager_s, first_s, again_s])
            if self.probe.can_restart:
                self.probe.restart()
                return "compiled"
            decision = pooled(self._rounds, keep_faster=keep_faster)
        self.decision = decision
        if self.store is not None and self._key and self.settings.rank == 0:
            try:
                self.store.save(self._key, self.decision)
            except OSError as exc:
                print(f"[trcomp] could not store the speed-up decision: {exc}", file=sys.stderr)
        keep_eager = self.decision.keep == "eager"
        self._set_eager(keep_eager)
        return "eager" if keep_eager else "compiled"

    def _set_eager(self, eager: bool) -> None:
        """Run the compiled modules eager or compiled from the next step."""
        through_stance = self.autocompile is None or bool(self.autocompile.script_compiled)
        self.mode.set(eager, through_stance=through_stance)

    def _hook_modules(self) -> list[Any]:
        """The modules the hook compiled or adopted (:class:`.compiled.CompiledModule`)."""
        return list(self.autocompile.compiled) if self.autocompile is not None else []

    def _step_ran_compiled(self) -> bool:
        """Whether the step that just ended ran compiled code and checked no module
        (:func:`.state.ran_compiled`); without hook modules (a model the script compiled
        with plain ``torch.compile``), whether some graph exists, as before."""
        entries = self._hook_modules()
        before, self._calls_before = self._calls_before, {id(e): e.calls for e in entries}
        if not entries:
            return self._graphs_run() > 0
        script = bool(self.autocompile is not None and self.autocompile.script_compiled)
        return ran_compiled(entries, before, script_compiled=script)

    def _all_eager_by_verdict(self) -> str | None:
        """Why there is nothing to measure (:func:`.state.all_eager_by_verdict`); None otherwise.

        One process only: ranks must stop together (they exchange their figures at the
        window's end), and a compile failure or a limit is each rank's own. With several,
        the windows find no clean step and the ranks agree there is no figure.
        """
        entries = self._hook_modules()
        if self.autocompile is not None and self.autocompile.script_compiled:
            return None
        if str(self.settings.world_size) not in ("", "1"):
            return None
        return all_eager_by_verdict(entries)

    def _graphs_run(self) -> int:
        """Graphs dynamo compiled, and ahead-of-time artifacts that ran (loaded ones too)."""
        aot = self.autocompile.aot_graphs if self.autocompile is not None else 0
        return torch_compat.unique_graphs() + aot

    def aot_report(self) -> dict[str, Any]:
        """Ahead-of-time artifacts compiled or loaded: dynamo's compile callbacks see neither."""
        states = [
            entry.aot.state
            for entry in (self.autocompile.compiled if self.autocompile is not None else [])
            if entry.aot is not None
        ]
        paths = [state.path for state in states]
        return {
            "events": sum(1 for path in paths if path != "off"),
            "seconds": sum(state.seconds for state in states),
            "loaded": paths.count("loaded"),
            "saved": paths.count("saved"),
            "discarded_graphs": sum(state.discarded_graphs for state in states),
        }

    # -- report -----------------------------------------------------------------

    def report(self, wall_s: float, steps: int = 0) -> dict[str, Any]:
        """The ``autocompile`` and ``speedup`` parts of this process's record (``steps``:
        the optimizer steps the session counted)."""
        graphs = torch_compat.unique_graphs()
        auto = self.autocompile.report(graphs) if self.autocompile else None
        if auto is not None and self.autocompile is not None:
            for entry, module in zip(self.autocompile.compiled, auto["modules"], strict=True):
                state = entry.state_at_end
                if graphs == 0 and not entry.ran_aot and state.runs_compiled:
                    state = ModuleState.EAGER_BY_VERDICT  # dynamo broke every graph
                module["state"] = state.value
                # Compile seconds spent inside the check (verify_s excludes them).
                module["verify_compile_s"] = round(entry.verify_compile_s, 4)
        return {"autocompile": auto, "speedup": self._speedup_report(wall_s, steps)}

    def _ended_while_noisy(self) -> Decision:
        """What a job that ended while measuring again after noisy rounds ran: compiled
        (neither round measured it slower than eager in both windows), with the figure of
        the rounds it measured."""
        figures = pooled(self._rounds, keep_faster=False)
        return replace(
            figures,
            keep="compiled",
            reason=f"too noisy to decide: {len(self._rounds)} noisy measurement(s), "
            f"{figures.speedup:.2f}x of eager all together, and the job ended before it "
            "measured again: it kept compiling",
        )

    def _speedup_report(self, wall_s: float, steps: int) -> dict[str, Any]:
        if self.engine in NO_EAGER_IN_PROCESS:
            return {"decision": None, "not_measured": NO_EAGER_IN_PROCESS[self.engine]}
        if self.engine is None:
            return {"decision": None, "not_measured": "no compiler ran"}
        if self.probe is None:
            return {"decision": None, "not_measured": "measure_speedup=False: not measured"}
        measurement = self.probe.measurement
        if self.decision is None and self._rounds and not self.probe.done:
            self.decision = self._ended_while_noisy()
            # Kept for the lineage's next job as any decision is (it is measured again
            # after REMEASURE_AFTER uses): on a busy machine every job may end so.
            if self.store is not None and self._key and self.settings.rank == 0:
                with contextlib.suppress(OSError):
                    self.store.save(self._key, self.decision)
        report: dict[str, Any] = {
            "decision": self.decision.as_dict() if self.decision else None,
            "compiled_steps": measurement.compiled_steps,
            "eager_steps": self.probe.eager_steps,
            "not_measured": self.probe.not_measured,
            "cost_s": None,
            "cost_share": None,
        }
        report["steps_from"] = self.steps_from
        unit = "optimizer steps" if self.steps_from == "optimizer" else "backward passes"
        if self.decision is None and report["not_measured"] is None and steps == 0:
            report["not_measured"] = (
                "the script stepped no torch.optim optimizer, and no step of its loop was "
                "found (no backward pass reached the model's parameters"
                + (
                    ""
                    if self.backward_steps is None
                    else f" more than {BACKWARDS_BEFORE_STEPS} times"
                )
                + "): nothing to time compiled steps against eager"
            )
        elif self.decision is None and report["not_measured"] is None:
            report["not_measured"] = (
                f"the job ended before the measurement was done (it needs "
                f"{self.probe.steps_needed()} {unit})"
            )
        if self.decision is not None and self.decision.source == "measured":
            extra = len(self.probe.eager_steps) * (
                self.decision.eager_step_s - self.decision.compiled_step_s
            )
            report["cost_s"] = round(max(0.0, extra), 6)
            report["cost_share"] = round(max(0.0, extra) / wall_s, 6) if wall_s > 0 else None
        return report


def _memory_reason(torch: Any) -> str | None:
    """Why the eager window is skipped on this device (memory); None to run it."""
    try:
        if not torch.cuda.is_available() or not torch.cuda.is_initialized():
            return None
        device = torch.cuda.current_device()
        peak = torch.cuda.max_memory_allocated(device)
        total = torch.cuda.get_device_properties(device).total_memory
    except RuntimeError:  # a CUDA error: no reason known to skip
        return None
    return memory_too_close(int(peak), int(total))
