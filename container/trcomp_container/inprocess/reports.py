"""The parts of a process's record read from the libraries themselves, at exit.

Standard library only at import; each library is read only when the script loaded it.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

from trcomp_container.inprocess import torch_compat

__all__ = [
    "JAX_ENGINE",
    "compile_report",
    "jax_report",
    "versions",
    "write_debug_reports",
    "xla_compile_count",
    "xla_report",
]

JAX_ENGINE = "trcomp.runtime.jax_engine"
"""The jax engine's module: loaded means the script used it."""


def compile_report(compile_s: float, events: int, recompiles: int) -> dict[str, Any]:
    """Dynamo's and inductor's counters, with the compile time the callbacks measured."""
    report: dict[str, Any] = {
        "time_s": round(compile_s, 4),
        "events": events,
        "recompiles": recompiles,
        "graphs": 0,
        "graph_breaks": 0,
        "graph_break_reasons": {},
    }
    cache = torch_compat.inductor_cache_counts()
    if cache is not None:
        breaks = torch_compat.graph_break_counts()
        report["graphs"] = torch_compat.unique_graphs()
        report["graph_breaks"] = int(sum(breaks.values()))
        top = sorted(breaks.items(), key=lambda item: -item[1])[:20]
        report["graph_break_reasons"] = {reason[:300]: count for reason, count in top}
        report["cache"] = cache
    return report


def xla_compile_count() -> int | None:
    """torch-xla's compile count so far; None when the script did not load torch-xla."""
    if "torch_xla" not in sys.modules:
        return None
    import torch_xla.debug.metrics as met

    data = met.metric_data("CompileTime")
    return int(data[0]) if data else 0


def xla_report(at_step3: int | None, at_last_step: int | None) -> dict[str, Any] | None:
    """torch-xla's compile count and time, and compiles after warm-up; None without it."""
    if "torch_xla" not in sys.modules:
        return None
    import torch_xla.debug.metrics as met

    data = met.metric_data("CompileTime")
    counters = {
        name: met.counter_value(name)
        for name in met.counter_names()
        if name.startswith("aten::") or "Cache" in name or "Compile" in name
    }
    steady = None
    if at_step3 is not None and at_last_step is not None:
        steady = at_last_step - at_step3
    return {
        "compiles": int(data[0]) if data else 0,
        "compile_time_s": round(data[1] / 1e9, 4) if data else 0.0,
        "compiles_after_warmup": steady,
        "counters": counters,
    }


def jax_report() -> dict[str, Any] | None:
    """The jax engine's counters, when the script used it."""
    engine = sys.modules.get(JAX_ENGINE)
    return None if engine is None else engine.STATS.as_dict()


def versions() -> dict[str, str]:
    """Versions of the libraries the script loaded."""
    found = {}
    for name in ("torch", "torch_xla", "jax", "torchax", "transformers", "accelerate"):
        module = sys.modules.get(name)
        if module is not None:
            found[name] = str(getattr(module, "__version__", "unknown"))
    return found


def write_debug_reports(directory: Path | None, rank: int) -> None:
    """Dynamo's compile times and torch-xla's metrics report, under ``directory``."""
    if directory is None:
        return
    directory.mkdir(parents=True, exist_ok=True)
    times = torch_compat.compile_times_text()
    if times is not None:
        (directory / f"compile_times.rank{rank}.txt").write_text(times)
    if "torch_xla" in sys.modules:
        import torch_xla.debug.metrics as met

        (directory / f"xla_metrics_report.rank{rank}.txt").write_text(met.metrics_report())
