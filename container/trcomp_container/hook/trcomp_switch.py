"""The one switch inside the training process: what to compile, and whether compiling pays.

Glue between the start-up hook (``sitecustomize``), the compile policy
(:mod:`trcomp_autocompile`) and the eager-against-compiled measurement
(:mod:`trcomp_speedup`). It reads the resolved config the container exported
(``TRCOMP_CONFIG``) and acts only under the inductor backend; for the XLA
engines it records why no eager comparison is possible in the same process.
"""

from __future__ import annotations

import os
import statistics
import sys
from pathlib import Path
from typing import Any

from trcomp_autocompile import AutoCompile, module_signature
from trcomp_speedup import (
    Decision,
    DecisionStore,
    Measurement,
    SpeedupProbe,
    agree,
    decide,
    fingerprint,
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


class Switch:
    """Created when torch is imported; fed every optimizer step by the hook."""

    def __init__(self, torch: Any, config: Any, environ: dict[str, str] | os._Environ[str]) -> None:
        self._torch = torch
        self.config = config
        self.engine = config.engine if config.enabled else None
        self.autocompile: AutoCompile | None = None
        self.probe: SpeedupProbe | None = None
        self.decision: Decision | None = None
        self._model_signature: str | None = None
        self._key: str | None = None
        self._stance = "default"
        cache = environ.get("TRCOMP_CACHE_DIR")
        self.store = DecisionStore(Path(cache) / _STORE_FILE) if cache else None
        if self.engine != "inductor":
            return
        self.probe = SpeedupProbe()
        if config.auto_compile:
            self.autocompile = AutoCompile(
                torch,
                compile_kwargs=config.compile_kwargs(),
                fallback_eager=config.fallback == "eager",
                regional=config.compiles_regionally,
                on_model=self._on_model,
            )
            self.autocompile.install()

    # -- the model --------------------------------------------------------------

    def _on_model(self, module: Any) -> None:
        if self._model_signature is not None:
            return
        self._model_signature = module_signature(module)
        self._key = self._fingerprint()
        stored = self.store.load(self._key) if self.store is not None else None
        if stored is None or self.probe is None:
            return
        # Measured by an earlier job of this lineage on the same model, config and versions.
        self.decision = stored
        self.probe.phase = "done"
        if stored.keep == "eager":
            self._set_stance("force_eager")

    def _fingerprint(self) -> str:
        torch = self._torch
        device = "cpu"
        try:
            if torch.cuda.is_available():
                device = torch.cuda.get_device_name()
        except Exception:
            device = "unknown"
        config = self.config.model_dump(mode="json")
        config.pop("fallback_reason", None)
        return fingerprint(
            {
                "model": self._model_signature,
                "config": config,
                "torch": torch.__version__,
                "device": device,
                "world_size": os.environ.get("WORLD_SIZE", "1"),
                "script": os.path.basename(sys.argv[0]) if sys.argv else "",
            }
        )

    # -- steps ------------------------------------------------------------------

    def before_compile(self) -> None:
        """Dynamo starts compiling: the global hooks go first, so no graph guards on them.

        A graph traced while they are registered would guard on their number and
        compile again once they are removed.
        """
        if self.autocompile is not None and self.autocompile.active:
            self.autocompile.remove()

    def on_step(self, step: int, compile_events: int, clock: Any) -> None:
        """After optimizer step ``step`` (1-based) of the job's first optimizer."""
        if self.autocompile is not None and self.autocompile.active:
            self.autocompile.remove()
        if self.probe is None or self.probe.phase == "done":
            return

        def finish(measurement: Measurement) -> str | None:
            return self._finish(measurement, clock)

        stance = self.probe.on_step(step, compile_events, finish, compiled=_graphs() > 0)
        if stance is not None:
            self._set_stance(stance)

    def _finish(self, measurement: Measurement, clock: Any) -> str | None:
        intervals = clock.intervals()  # one synchronization on a GPU
        eager = step_times(intervals, measurement.eager_steps)
        compiled = step_times(intervals, measurement.compiled_steps)
        if not eager or not compiled:
            if self.probe is not None:
                self.probe.not_measured = "the step clock kept too few intervals"
            return "default"
        eager_s, compiled_s = agree(
            statistics.median(eager), statistics.median(compiled), _reduce_max()
        )
        self.decision = decide([eager_s], [compiled_s], keep_faster=self.config.keeps_faster)
        if self.store is not None and self._key and os.environ.get("RANK", "0") == "0":
            try:
                self.store.save(self._key, self.decision)
            except OSError as exc:
                print(f"[trcomp] could not store the speed-up decision: {exc}", file=sys.stderr)
        return "force_eager" if self.decision.keep == "eager" else "default"

    def _set_stance(self, stance: str) -> None:
        if stance != self._stance:
            self._torch.compiler.set_stance(stance)
            self._stance = stance

    # -- report -----------------------------------------------------------------

    def report(self, wall_s: float) -> dict[str, Any]:
        """The ``autocompile`` and ``speedup`` parts of this process's metrics record."""
        body: dict[str, Any] = {
            "autocompile": self.autocompile.report() if self.autocompile else None,
            "speedup": self._speedup_report(wall_s),
        }
        return body

    def _speedup_report(self, wall_s: float) -> dict[str, Any]:
        if self.engine in NO_EAGER_IN_PROCESS:
            return {"decision": None, "not_measured": NO_EAGER_IN_PROCESS[self.engine]}
        if self.probe is None:
            return {"decision": None, "not_measured": "no compiler ran"}
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
                f"{self.probe.steps_needed()} optimizer steps after compiling)"
            )
        if self.decision is not None and self.decision.source == "measured":
            extra = len(measurement.eager_steps) * (
                self.decision.eager_step_s - self.decision.compiled_step_s
            )
            report["cost_s"] = round(max(0.0, extra), 6)
            report["cost_share"] = round(max(0.0, extra) / wall_s, 6) if wall_s > 0 else None
        return report


def _graphs() -> int:
    """Graphs dynamo compiled in this process (0 when dynamo never ran)."""
    if "torch._dynamo" not in sys.modules:
        return 0
    from torch._dynamo.utils import counters

    return int(counters["stats"]["unique_graphs"])


def _reduce_max() -> Any:
    """Max across the job's ranks (torch.distributed), or None in a single process."""
    import torch.distributed as dist

    if not (dist.is_available() and dist.is_initialized()) or dist.get_world_size() < 2:
        return None

    def reduce_max(values: list[float]) -> list[float]:
        import torch

        device = "cpu"
        if dist.get_backend() == "nccl":
            device = f"cuda:{torch.cuda.current_device()}"
        tensor = torch.tensor(values, dtype=torch.float64, device=device)
        dist.all_reduce(tensor, op=dist.ReduceOp.MAX)
        return [float(value) for value in tensor.cpu()]

    return reduce_max
