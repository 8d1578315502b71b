"""The compiler metrics a job reports, as log lines and as SageMaker metric definitions.

The container prints one line per metric in :func:`format_metric`'s format;
the estimators register :func:`metric_definitions`, whose regexes match those
lines, so the numbers show up as SageMaker job metrics. One module, both sides.
"""

from __future__ import annotations

import re

__all__ = ["METRICS", "format_metric", "metric_definitions", "parse_metrics"]

PREFIX = "[trcomp] metric"

# name -> what it measures. Names are stable: dashboards and regexes use them.
METRICS: dict[str, str] = {
    "compile_time_s": "seconds spent compiling graphs (all ranks' maximum)",
    "graphs_compiled": "number of graphs the compiler compiled",
    "recompiles": "graphs compiled again because a guard failed (shapes, dtypes)",
    "graph_breaks": "places where the compiler fell back to Python (inductor only)",
    "first_step_s": "seconds from script start to the end of the first optimizer step",
    "step_time_s": "steady-state seconds per optimizer step (median after warm-up)",
    "steps_per_s": "steady-state optimizer steps per second",
    "eager_step_s": "seconds per optimizer step run eager in this job, to compare (median)",
    "speedup_vs_eager": "eager_step_s over the compiled step time measured beside it",
}

_NUMBER = r"([0-9]+(?:\.[0-9]+)?(?:[eE][-+]?[0-9]+)?)"


def format_metric(name: str, value: float) -> str:
    """The log line for one metric, e.g. ``[trcomp] metric compile_time_s=17.2``."""
    if name not in METRICS:
        raise KeyError(f"unknown trcomp metric {name!r}; known: {', '.join(METRICS)}")
    text = f"{value:.6g}" if isinstance(value, float) else str(value)
    return f"{PREFIX} {name}={text}"


def metric_definitions() -> list[dict[str, str]]:
    """SageMaker ``metric_definitions`` entries matching :func:`format_metric` lines."""
    return [
        {"Name": f"trcomp:{name}", "Regex": re.escape(f"{PREFIX} {name}=") + _NUMBER}
        for name in METRICS
    ]


def parse_metrics(log_text: str) -> dict[str, float]:
    """Read metric lines back from a log (the last value of each wins)."""
    found: dict[str, float] = {}
    for definition in metric_definitions():
        for match in re.finditer(definition["Regex"], log_text):
            found[definition["Name"].removeprefix("trcomp:")] = float(match.group(1))
    return found
