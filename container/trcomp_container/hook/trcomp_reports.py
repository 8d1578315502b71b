"""The parts of a process's metrics record read from the libraries themselves, at exit.

Used by the start-up hook (``sitecustomize``); standard library only at import.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import Any

__all__ = [
    "c10d_store",
    "compile_report",
    "jax_report",
    "versions",
    "write_debug_reports",
    "xla_report",
]


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
    if "torch._dynamo" in sys.modules:
        from torch._dynamo.utils import counters

        breaks = dict(counters["graph_break"])
        report["graphs"] = int(counters["stats"]["unique_graphs"])
        report["graph_breaks"] = int(sum(breaks.values()))
        top = sorted(breaks.items(), key=lambda item: -item[1])[:20]
        report["graph_break_reasons"] = {reason[:300]: count for reason, count in top}
        report["cache"] = {
            "fxgraph_hit": int(counters["inductor"]["fxgraph_cache_hit"]),
            "fxgraph_miss": int(counters["inductor"]["fxgraph_cache_miss"]),
            "aotautograd_hit": int(counters["aot_autograd"]["autograd_cache_hit"]),
            "aotautograd_miss": int(counters["aot_autograd"]["autograd_cache_miss"]),
        }
    return report


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
    engine = sys.modules.get("trcomp.runtime_jax")
    return None if engine is None else engine.STATS.as_dict()


def versions() -> dict[str, str]:
    """Versions of the libraries the script loaded."""
    found = {}
    for name in ("torch", "torch_xla", "jax", "torchax", "transformers", "accelerate"):
        module = sys.modules.get(name)
        if module is not None:
            found[name] = str(getattr(module, "__version__", "unknown"))
    return found


def write_debug_reports(rank: str) -> None:
    """Dynamo's compile times and torch-xla's metrics report, under ``TRCOMP_COMPILER_DIR``."""
    directory = os.environ.get("TRCOMP_COMPILER_DIR")
    if not directory:
        return
    target = Path(directory)
    target.mkdir(parents=True, exist_ok=True)
    if "torch._dynamo" in sys.modules:
        from torch._dynamo.utils import compile_times

        text = compile_times(repr="str", aggregate=True)
        (target / f"compile_times.rank{rank}.txt").write_text(str(text))
    if "torch_xla" in sys.modules:
        import torch_xla.debug.metrics as met

        (target / f"xla_metrics_report.rank{rank}.txt").write_text(met.metrics_report())


def c10d_store() -> Any:
    """The default process group's c10d store (a torch private name), or None.

    The speed-up measurement exchanges its figures there, never on the training
    group; tests/container/test_autocompile_policy.py fails if torch renames it.
    """
    try:
        from torch.distributed import distributed_c10d

        return distributed_c10d._get_default_store()
    except Exception:
        return None
