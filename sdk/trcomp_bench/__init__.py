"""Benchmarks: eager PyTorch against each compiler, side by side, on your machine.

``python -m trcomp_bench`` (or ``trcomp bench``) runs the reference workloads;
:func:`run_benchmark` and :func:`find_batch_size` are the same from Python.
Importing this package does not import torch: every measurement runs in its
own subprocess. Its dependencies are trcomp's ``bench`` extra; ``import trcomp``
never imports it. See docs/benchmarks.md.

What runs a measurement, shared by every command: :mod:`trcomp_bench.runs`
(a child process per measurement, capped; the budgeted job loop; results
written as they come) and :mod:`trcomp_bench.results` (the one markdown table
writer, the result files). The commands on top: the CPU benchmark
(:mod:`~trcomp_bench.cli`, :mod:`~trcomp_bench.harness`, :mod:`~trcomp_bench.worker`;
:mod:`~trcomp_bench.rounds` judges its rounds),
the launch overhead (:mod:`~trcomp_bench.launch`), the GPU throughput script
(:mod:`~trcomp_bench.gpu_h200`) and ``make gpu-check`` (:mod:`~trcomp_bench.gpu_check`).
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
