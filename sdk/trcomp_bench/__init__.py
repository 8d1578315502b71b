"""Benchmarks: eager PyTorch against each compiler, side by side, on your machine.

``python -m trcomp_bench`` (or ``trcomp bench``) runs the reference workloads;
:func:`run_benchmark` and :func:`find_batch_size` are the same from Python.
Importing this package does not import torch: every measurement runs in its
own subprocess. See docs/benchmarks.md.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from trcomp_bench.batchsize import find_batch_size, scale_learning_rate
    from trcomp_bench.harness import BenchOptions, BenchResult, run_benchmark
    from trcomp_bench.results import Row

__all__ = [
    "BenchOptions",
    "BenchResult",
    "Row",
    "find_batch_size",
    "run_benchmark",
    "scale_learning_rate",
]

_HOMES = {
    "BenchOptions": "harness",
    "BenchResult": "harness",
    "run_benchmark": "harness",
    "Row": "results",
    "find_batch_size": "batchsize",
    "scale_learning_rate": "batchsize",
}


def __getattr__(name: str) -> Any:
    # Lazy so that `import trcomp_bench` stays light (the harness needs tqdm).
    if name in _HOMES:
        import importlib

        return getattr(importlib.import_module(f"trcomp_bench.{_HOMES[name]}"), name)
    raise AttributeError(f"module 'trcomp_bench' has no attribute {name!r}")
