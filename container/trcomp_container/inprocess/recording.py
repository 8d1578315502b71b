"""This rank's record, built from the session at exit (writes :class:`.record.RankRecord`)."""

from __future__ import annotations

import os
import time
from typing import TYPE_CHECKING, Any

from trcomp_container.inprocess import reports
from trcomp_container.inprocess.record import RankRecord

if TYPE_CHECKING:
    from trcomp_container.inprocess.session import Session

__all__ = ["build_record"]


def build_record(session: Session) -> RankRecord:
    """What this process measured, compiled and decided, and why it failed if it did."""
    state = session.state
    settings = session.settings
    switch = session.switch
    wall_s = time.time() - session.started
    body: dict[str, Any] = {
        "rank": settings.rank,
        "local_rank": settings.local_rank,
        "pid": os.getpid(),
        "backend": settings.backend,
        "wall_s": round(wall_s, 4),
        "steps": state.steps,
        "first_step_s": state.first_step_s,
        "step_intervals_s": [round(value, 6) for value in state.clock.intervals()],
        "step_clock": state.clock.source,
        "error": state.error,
        "warnings": state.warnings,
        "versions": reports.versions(),
    }

    def failed(exc: Exception) -> None:
        body["hook_error"] = f"{type(exc).__name__}: {exc}"

    with session.guarded(failed):
        if switch is not None:
            body.update(switch.report(wall_s, state.steps))
            body["warnings"] = [*state.warnings, *switch.warnings]
        aot = switch.aot_report() if switch is not None else None
        body["compile"] = reports.compile_report(
            state.compile_s + (aot["seconds"] if aot else 0.0),
            state.compile_events + (aot["events"] if aot else 0),
            state.recompiles,
        )
        body["compile"]["aot"] = aot
        guard = session.redis_guard
        if guard is not None:  # a Redis shared cache: values no key signed were misses
            if body["compile"].get("cache") is not None:
                body["compile"]["cache"]["redis_values_refused"] = guard.refused
                body["compile"]["cache"]["redis_values_withdrawn"] = guard.withdrawn
            said = [guard.refused_warning(), guard.withdrawn_warning()]
            body["warnings"] = [*body["warnings"], *filter(None, said)]
        body["compile"]["turns"] = session.turns.as_dict()
        if aot:  # a loaded artifact runs a compiled graph dynamo never counted; a
            # failed attempt's graph, which dynamo counted, never runs
            body["compile"]["graphs"] += aot["loaded"] - aot["discarded_graphs"]
        body["xla"] = reports.xla_report(
            state.xla_compiles_at_step3, state.xla_compiles_at_last_step
        )
        body["jax"] = reports.jax_report()
        if settings.debug:
            reports.write_debug_reports(settings.compiler_dir, settings.rank)
    return RankRecord.from_json(body)
