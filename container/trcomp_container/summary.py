"""Aggregate the per-process metrics into ``summary.json`` and the metric log lines.

Each training process writes ``rank<N>-pid<P>.json`` (a
:class:`~trcomp_container.inprocess.record.RankRecord`); this module reads them,
keeps one record per rank, and reports the slowest rank's numbers, since the
job is as slow as its slowest rank.
"""

from __future__ import annotations

import json
import statistics
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from trcomp.contract.metrics import METRICS, format_metric
from trcomp_container import switch_report
from trcomp_container.inprocess import record as rank_record
from trcomp_container.inprocess.record import RankRecord

__all__ = [
    "SCHEMA_VERSION",
    "build_summary",
    "metric_lines",
    "read_rank_records",
    "render_block",
    "speedup_line",
    "write_summary",
]

SCHEMA_VERSION = 1
# Steps before this one are warm-up: they include compilation.
_WARMUP_INTERVALS = 2
_XLA_CACHE_FAILURE = "PersistentCacheDeserializeFailure"


def read_rank_records(metrics_dir: Path) -> list[RankRecord]:
    """One record per rank: the process of that rank that stepped most (or failed).

    A file that cannot be read or is not a record is left out.
    """
    best: dict[int, RankRecord] = {}
    for path in sorted(Path(metrics_dir).glob(rank_record.RECORD_GLOB)):
        try:
            record = rank_record.read(path)
        except (OSError, ValueError):
            continue
        rank = int(record.rank)
        current = best.get(rank)
        if current is None or _weight(record) > _weight(current):
            best[rank] = record
    return [best[rank] for rank in sorted(best)]


def _weight(record: RankRecord) -> tuple[int, int, int]:
    compile_events = int(record.compile.events) if record.compile is not None else 0
    return (int(record.steps), 1 if record.error else 0, compile_events)


def steady_step_time(intervals: Sequence[float], skip_steps: Sequence[int] = ()) -> float | None:
    """Median seconds per step once warm-up (compilation) is over.

    ``skip_steps`` (1-based) are left out: the eager steps of the speed-up measurement.
    """
    skip = {step - 2 for step in skip_steps}  # interval i ends step i + 2
    kept = [value for index, value in enumerate(intervals) if index not in skip]
    if not kept:
        return None
    steady = kept[_WARMUP_INTERVALS:] if len(kept) > _WARMUP_INTERVALS + 2 else kept
    return float(statistics.median(steady))


def _rank_metrics(record: RankRecord) -> dict[str, float | None]:
    jax, xla, compile_info = record.jax, record.xla, record.compile
    if jax:
        compile_time = float(jax.get("compile_time_s", 0.0))
        graphs = int(jax.get("programs_compiled", 0))
        recompiles = int(jax.get("recompiles_after_warmup", 0))
        graph_breaks = 0
    elif xla is not None:
        compile_time = float(xla.compile_time_s)
        graphs = int(xla.compiles)
        recompiles = int(xla.compiles_after_warmup or 0)
        graph_breaks = 0
    elif compile_info is not None:
        compile_time = float(compile_info.time_s)
        graphs = int(compile_info.graphs)
        recompiles = int(compile_info.recompiles)
        graph_breaks = int(compile_info.graph_breaks)
    else:
        compile_time, graphs, recompiles, graph_breaks = 0.0, 0, 0, 0
    step = steady_step_time(record.step_intervals_s, switch_report.eager_step_numbers(record))
    decision = switch_report.shown_decision(record)  # none where no compiled code ran
    return {
        "compile_time_s": compile_time,
        "graphs_compiled": graphs,
        "recompiles": recompiles,
        "graph_breaks": graph_breaks,
        "first_step_s": record.first_step_s,
        "step_time_s": step,
        "steps_per_s": (1.0 / step) if step else None,
        "eager_step_s": decision.eager_step_s if decision is not None else None,
        "speedup_vs_eager": decision.speedup if decision is not None else None,
    }


def _slowest(per_rank: list[dict[str, float | None]]) -> dict[str, float]:
    metrics: dict[str, float] = {}
    # steps_per_s is derived from the slowest rank's step time below.
    for name in (name for name in METRICS if name != "steps_per_s"):
        values = [value for rank in per_rank if (value := rank[name]) is not None]
        if values:
            metrics[name] = max(values)
    if metrics.get("step_time_s"):
        metrics["steps_per_s"] = 1.0 / metrics["step_time_s"]
    return metrics


def build_summary(
    records: Sequence[RankRecord], *, job: Mapping[str, Any], warnings: Sequence[str] = ()
) -> dict[str, Any]:
    """The summary.json body: job facts, aggregated metrics, one entry per rank."""
    per_rank = [_rank_metrics(record) for record in records]
    versions: dict[str, str] = {}
    for record in records:
        versions.update(record.versions)
    ranks = [
        _rank_entry(record, metrics) for record, metrics in zip(records, per_rank, strict=True)
    ]
    backend, engine = job.get("backend"), job.get("engine")
    silent = switch_report.nothing_compiled(
        records, backend, engine, auto_compile=bool(job.get("auto_compile", True))
    )
    return {
        "schema_version": SCHEMA_VERSION,
        **job,
        "compiled": switch_report.compiled_text(records, backend),
        "verified": switch_report.verified_text(records),
        "warm_start": None
        if backend is None
        else switch_report.warm_start(records, bool(job.get("cache_warm"))),
        "speedup": switch_report.speedup_summary(records),
        "by_rank": switch_report.ranks_text(records),
        "first_step_skew_s": switch_report.first_step_skew(records),
        "warnings": [*warnings, *_derived_warnings(records), *filter(None, [silent])],
        "metrics": _slowest(per_rank),
        "versions": versions,
        "ranks": ranks,
    }


def _rank_entry(record: RankRecord, metrics: Mapping[str, float | None]) -> dict[str, Any]:
    """One rank's entry of summary.json's ``ranks``: the record's parts as its JSON has them."""
    compile_info = record.compile
    cache = compile_info.cache if compile_info is not None else None
    return {
        "rank": record.rank,
        "pid": record.pid,
        "steps": record.steps,
        "step_clock": record.step_clock,
        **metrics,
        "graph_break_reasons": dict(compile_info.graph_break_reasons) if compile_info else {},
        "compile_cache": cache.to_json() if cache is not None else None,
        "xla": record.xla.to_json() if record.xla is not None else None,
        "jax": record.jax,
        "error": record.error.to_json() if record.error is not None else None,
        "autocompile": record.autocompile.to_json() if record.autocompile is not None else None,
        "speedup": record.speedup.to_json() if record.speedup is not None else None,
    }


def _derived_warnings(records: Sequence[RankRecord]) -> list[str]:
    never = switch_report.no_compiled_code_ran(records)
    compiled = bool(records and records[0].compile is not None and records[0].compile.graphs)
    ran_eager = [f"the compiler was on but {never}"] if never and compiled else []
    return [*switch_report.compiled_less(records), *ran_eager, *_xla_cache_warnings(records)]


def _xla_cache_warnings(records: Sequence[RankRecord]) -> list[str]:
    unreadable = sum(
        int(record.xla.counters.get(_XLA_CACHE_FAILURE, 0)) for record in records if record.xla
    )
    if not unreadable:
        return []
    return [
        f"torch-xla could not read {unreadable} entries of its persistent cache "
        f"({_XLA_CACHE_FAILURE}); those graphs were compiled again. On CPU, torch-xla "
        "2.9 could not reload its cached executables, so the cache does not shorten CPU runs."
    ]


def metric_lines(summary: Mapping[str, Any]) -> list[str]:
    """The ``[trcomp] metric name=value`` lines SageMaker's metric regexes match."""
    return [format_metric(name, value) for name, value in summary["metrics"].items()]


def render_block(summary: Mapping[str, Any]) -> str:
    """A short human-readable report for the job log."""
    metrics = summary["metrics"]

    def show(name: str, unit: str = "") -> str:
        value = metrics.get(name)
        if value is None:
            return "n/a"
        return f"{value:.4g}{unit}" if isinstance(value, float) else f"{value}{unit}"

    backend = summary.get("backend") or "eager (compiler off)"
    if summary.get("engine") and summary.get("engine") != summary.get("backend"):
        backend = f"{backend} on the {summary['engine']} engine"
    lines = [
        "=" * 20 + " trcomp summary " + "=" * 20,
        f"backend        {backend} (asked: {summary.get('requested_backend')})",
        f"compiled       {summary.get('compiled') or 'n/a'}",
        *([f"verified       {summary['verified']}"] if summary.get("verified") else []),
        f"devices        {summary.get('devices')}; processes: {len(summary.get('ranks', []))}",
        *([f"by rank        {summary['by_rank']}"] if summary.get("by_rank") else []),
        f"compile time   {show('compile_time_s', ' s')}; graphs {show('graphs_compiled')}; "
        f"recompiles {show('recompiles')}; graph breaks {show('graph_breaks')}",
        f"first step     {show('first_step_s', ' s')} after start"
        + (f" (from: {summary['warm_start']})" if summary.get("warm_start") else "")
        + "; "
        f"steady step {show('step_time_s', ' s')} ({show('steps_per_s')} steps/s)",
        f"speed-up       {speedup_line(summary.get('speedup'))}",
        f"cache          {summary.get('cache_dir') or 'off'}"
        + (" (warm)" if summary.get("cache_warm") else ""),
        f"exit           {summary.get('exit_code')}: {summary.get('outcome')}",
    ]
    for warning in summary.get("warnings", []):
        lines.append(f"WARNING        {warning}")
    if summary.get("metrics", {}).get("recompiles"):
        lines.append(
            "hint           recompiles mean changing shapes or dtypes; pad batches to fixed "
            "shapes or set dynamic=True"
        )
    lines.append("=" * 56)
    return "\n".join(lines)


def speedup_line(speedup: Mapping[str, Any] | None) -> str:
    """``1.32x vs eager, measured in this job (...)``, or why it was not measured."""
    if not speedup:
        return "n/a"
    if speedup.get("speedup_vs_eager") is None:
        return f"not measured: {speedup.get('reason') or 'unknown'}"
    where = "in this job" if speedup.get("source") == "measured" else "by an earlier job"
    line = (
        f"{speedup['speedup_vs_eager']:.2f}x vs eager, measured {where} (compiled "
        f"{speedup['compiled_step_s']:.4g} s, eager {speedup['eager_step_s']:.4g} s per "
        f"step); kept {speedup['kept']}"
    )
    reason = str(speedup.get("reason") or "")
    if reason.startswith("too noisy to decide"):
        line += " (too noisy to decide)"
    if speedup.get("steps_from") == "backward":
        line += " (steps: backward passes, the loop steps no torch.optim optimizer)"
    if speedup.get("cost_s") is not None:
        line += f"; measuring cost {speedup['cost_s']:.3g} s"
    return line


def write_summary(path: Path, summary: Mapping[str, Any]) -> Path:
    """Write ``summary`` as indented JSON, creating the directory."""
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(summary, indent=2, sort_keys=True, default=str) + "\n")
    return path
