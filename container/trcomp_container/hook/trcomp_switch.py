"""The one switch inside the training process: what to compile, and whether compiling pays.

Glue between the start-up hook (``sitecustomize``), the compile policy
(:mod:`trcomp_autocompile`) and the eager-against-compiled measurement
(:mod:`trcomp_speedup`). It reads the resolved config the container exported
(``TRCOMP_CONFIG``) and acts only under the inductor backend; for the XLA
engines it records why no eager comparison is possible in the same process.
"""

from __future__ import annotations

import contextlib
import json
import os
import platform
import statistics
import sys
from pathlib import Path
from typing import Any

from trcomp_aot import AOT_DIR, unique_graphs
from trcomp_autocompile import AutoCompile, module_signature
from trcomp_speedup import (
    REMEASURE_AFTER,
    Decision,
    DecisionStore,
    Measurement,
    SpeedupProbe,
    agree,
    decide,
    fingerprint,
    memory_too_close,
    step_times,
)

__all__ = ["NO_EAGER_IN_PROCESS", "Switch"]

NO_EAGER_IN_PROCESS = {
    "torch_xla": "torch-xla traces lazily on its own device: the same process cannot run "
    "the model eager for comparison",
    "jax": "the jax engine runs compile_step as XLA programs; torchax's eager mode is "
    "op by op, not the eager PyTorch the job would otherwise run",
}
_STORE_FILE = Path("trcomp") / "speedup.json"
_OTHER_OPTIMIZER_STEPS = 8  # steps of other optimizers in a row: the script changed phase
_EXCHANGE_TIMEOUT_S = 60.0


class Switch:
    """Created when torch is imported; fed every optimizer step by the hook."""

    def __init__(self, torch: Any, config: Any, environ: dict[str, str] | os._Environ[str]) -> None:
        self._torch = torch
        self.config = config
        self.engine = config.engine if config.enabled else None
        self.autocompile: AutoCompile | None = None
        self.probe: SpeedupProbe | None = None
        self.decision: Decision | None = None
        self.warnings: list[str] = []
        self._model_signature: str | None = None
        self._key: str | None = None
        self._stance = "default"
        self._other_steps = 0
        cache = environ.get("TRCOMP_CACHE_DIR")
        self.store = DecisionStore(Path(cache) / _STORE_FILE) if cache else None
        if self.engine != "inductor":
            return
        if config.measure_speedup:
            self.probe = SpeedupProbe()
        if config.auto_compile:
            # getattr: a RuntimeConfig written by an older trcomp has no aot field.
            keep_aot = bool(cache) and getattr(config, "aot", True)
            self.autocompile = AutoCompile(
                torch,
                compile_kwargs=config.compile_kwargs(),
                fallback_eager=config.fallback == "eager",
                regional=config.compiles_regionally,
                on_model=self._on_model,
                on_error=self.warnings.append,
                aot_dir=Path(cache) / AOT_DIR if keep_aot and cache else None,
            )
            self.autocompile.install()

    # -- the model --------------------------------------------------------------

    def _on_model(self, module: Any, args: Any) -> None:
        if self._model_signature is not None:
            return
        self._model_signature = module_signature(module)
        self._key = self._fingerprint(args)
        loaded = self.store.load(self._key) if self.store is not None else None
        if loaded is None or self.probe is None:
            return
        stored, uses = loaded
        if uses >= REMEASURE_AFTER:
            return  # measured again by this job, stored afresh
        if self.store is not None and _rank() == 0:
            with contextlib.suppress(OSError):
                self.store.save(self._key, stored, uses=uses + 1)
        # Measured by an earlier job of this lineage on the same model, inputs and versions.
        self.decision = stored
        self.probe.phase = "done"
        if stored.keep == "eager":
            self._set_eager(True)

    def _fingerprint(self, args: Any) -> str:
        torch = self._torch
        config = self.config.model_dump(mode="json")
        config.pop("fallback_reason", None)
        inputs = [
            [list(arg.shape), str(arg.dtype)]
            if isinstance(arg, torch.Tensor)
            else type(arg).__name__
            for arg in args
        ]
        return fingerprint(
            {
                "model": self._model_signature,
                "inputs": inputs,
                "autocast": _autocast(torch),
                "config": config,
                "versions": [torch.__version__, self.config.trcomp_version],
                "device": _device(torch),
                "world_size": os.environ.get("WORLD_SIZE", "1"),
                "script": list(sys.argv),
            }
        )

    # -- steps ------------------------------------------------------------------

    def before_compile(self) -> None:
        """Dynamo starts compiling: once a trained module was seen, the global hooks go.

        A graph traced while they are registered would guard on their number and
        compile again once they are removed. A compile before any trained module
        was seen (a helper the script compiled) leaves them: the model is still to come.
        """
        auto = self.autocompile
        if auto is not None and auto.active and auto.saw_model:
            auto.remove()

    def on_other_optimizer(self) -> None:
        """Another optimizer than the job's first stepped (GAN, or a second phase)."""
        self._other_steps += 1
        if self._other_steps < _OTHER_OPTIMIZER_STEPS or self.probe is None:
            return
        if self.probe.phase in ("compiled", "eager", "after") or (
            self.probe.phase == "warmup" and self.decision is None
        ):
            self.probe.abandon(
                "the script stopped stepping its first optimizer (a second phase or another "
                "optimizer): the measurement was abandoned and the job kept compiling"
            )
            self._set_eager(False)

    def on_step(self, step: int, compile_events: int, clock: Any) -> None:
        """After optimizer step ``step`` (1-based) of the job's first optimizer."""
        self._other_steps = 0
        if self.autocompile is not None and self.autocompile.active:
            self.autocompile.remove()
        if self.probe is None or self.probe.phase == "done":
            return

        def finish(measurement: Measurement) -> str | None:
            return self._finish(measurement, clock)

        switch = self.probe.on_step(step, compile_events, finish, compiled=self._graphs_run() > 0)
        if switch == "eager":
            skip = _memory_reason(self._torch)
            if skip is not None:
                self.probe.abandon(skip)
                return
        if switch is not None:
            self._set_eager(switch == "eager")

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
        figures = agree(_exchange(local))
        if isinstance(figures, str):
            self.probe.not_measured = problem or figures
            return "compiled"
        eager_s, first_s, again_s = figures
        self.decision = decide(
            [eager_s], [first_s], compiled_again=[again_s], keep_faster=self.config.keeps_faster
        )
        if self.store is not None and self._key and _rank() == 0:
            try:
                self.store.save(self._key, self.decision)
            except OSError as exc:
                print(f"[trcomp] could not store the speed-up decision: {exc}", file=sys.stderr)
        keep_eager = self.decision.keep == "eager"
        self._set_eager(keep_eager)
        return "eager" if keep_eager else "compiled"

    def _set_eager(self, eager: bool) -> None:
        """Run the compiled modules eager or compiled from the next step.

        The hook's own modules switch on their own (no global state); a model the
        script compiled needs torch's compiler stance, restored on every way out.
        """
        if self.autocompile is not None and not self.autocompile.script_compiled:
            self.autocompile.eager = eager
            return
        stance = "force_eager" if eager else "default"
        if stance != self._stance:
            self._torch.compiler.set_stance(stance)
            self._stance = stance

    def _graphs_run(self) -> int:
        """Graphs dynamo compiled, and ahead-of-time artifacts that ran (loaded ones too)."""
        aot = self.autocompile.aot_graphs if self.autocompile is not None else 0
        return unique_graphs() + aot

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

    def report(self, wall_s: float) -> dict[str, Any]:
        """The ``autocompile`` and ``speedup`` parts of this process's metrics record."""
        body: dict[str, Any] = {
            "autocompile": self.autocompile.report(unique_graphs()) if self.autocompile else None,
            "speedup": self._speedup_report(wall_s),
        }
        return body

    def _speedup_report(self, wall_s: float) -> dict[str, Any]:
        if self.engine in NO_EAGER_IN_PROCESS:
            return {"decision": None, "not_measured": NO_EAGER_IN_PROCESS[self.engine]}
        if self.engine is None:
            return {"decision": None, "not_measured": "no compiler ran"}
        if self.probe is None:
            return {"decision": None, "not_measured": "measure_speedup=False: not measured"}
        measurement = self.probe.measurement
        report: dict[str, Any] = {
            "decision": self.decision.as_dict() if self.decision else None,
            "compiled_steps": measurement.compiled_steps,
            "eager_steps": measurement.eager_steps,
            "not_measured": self.probe.not_measured,
            "cost_s": None,
            "cost_share": None,
        }
        if self.decision is None and report["not_measured"] is None:
            report["not_measured"] = (
                f"the job ended before the measurement was done (it needs "
                f"{self.probe.steps_needed()} optimizer steps)"
            )
        if self.decision is not None and self.decision.source == "measured":
            extra = len(measurement.eager_steps) * (
                self.decision.eager_step_s - self.decision.compiled_step_s
            )
            report["cost_s"] = round(max(0.0, extra), 6)
            report["cost_share"] = round(max(0.0, extra) / wall_s, 6) if wall_s > 0 else None
        return report


def _rank() -> int:
    return int(os.environ.get("RANK", "0") or 0)


def _autocast(torch: Any) -> list[Any]:
    state = []
    for device in ("cpu", "cuda"):
        try:
            on = bool(torch.is_autocast_enabled(device))
            state.append([device, on, str(torch.get_autocast_dtype(device)) if on else None])
        except Exception:
            state.append([device, None, None])
    return state


def _device(torch: Any) -> list[Any]:
    """The accelerator model and count, or the CPU's: a decision is only valid on them."""
    try:
        if torch.cuda.is_available():
            return ["cuda", torch.cuda.get_device_name(), torch.cuda.device_count()]
    except Exception:
        return ["unknown"]
    model = platform.processor()
    try:
        with open("/proc/cpuinfo") as info:
            model = next(
                (line.split(":", 1)[1].strip() for line in info if line.startswith("model name")),
                model,
            )
    except OSError:
        pass
    return ["cpu", model, os.cpu_count()]


def _memory_reason(torch: Any) -> str | None:
    """Why the eager window is skipped on this device (memory); None to run it."""
    try:
        if not torch.cuda.is_available() or not torch.cuda.is_initialized():
            return None
        device = torch.cuda.current_device()
        peak = torch.cuda.max_memory_allocated(device)
        total = torch.cuda.get_device_properties(device).total_memory
    except Exception:
        return None
    return memory_too_close(int(peak), int(total))


def _exchange(local: list[float] | None) -> list[list[float] | None]:
    """Every rank's figures, through the c10d store (not the training group's collectives).

    DDP may have its gradient all-reduce in flight on the training group; a
    collective of ours there could pair with one of its own. The store is a
    separate channel every rank already has.
    """
    import torch.distributed as dist

    if not (dist.is_available() and dist.is_initialized()) or dist.get_world_size() < 2:
        return [local]
    from datetime import timedelta

    from trcomp_reports import c10d_store

    store = c10d_store()
    if store is None:
        return [None]
    world = dist.get_world_size()
    keys = [f"trcomp/speedup/{rank}" for rank in range(world)]
    store.set(keys[dist.get_rank()], json.dumps(local))
    try:
        store.wait(keys, timedelta(seconds=_EXCHANGE_TIMEOUT_S))
    except Exception:
        return [None]
    return [json.loads(store.get(key)) for key in keys]
