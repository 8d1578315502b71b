"""Run the benchmark: one subprocess per measurement, eager and the compilers interleaved.

Order of a run (``repeats=2``, three rounds): the cold round (every workload,
every backend, each with a fresh, empty compile cache), then the warm rounds
(the same runs again on the caches the cold round filled), then the shared round
(each compiled backend once more, on another, empty cache dir filled only from
the shared compile cache its cold run wrote: :mod:`trcomp_bench.shared_round`).
Inside a round the backends of a workload run back to back, in an order rotated
each round (eager, inductor; inductor, eager; ...), and each round gives its
own ratio against eager, so a row's ratio comes from runs seconds apart and the
spread of its rounds shows how far to trust it (:mod:`trcomp_bench.rounds`).
The load average is read around every run. Nothing here imports torch.
"""

from __future__ import annotations

import json
import os
import statistics
import sys
import tempfile
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from trcomp_bench.backends import backend_env, get_backend
from trcomp_bench.results import Row
from trcomp_bench.rounds import (
    DEFAULT_SPREAD_BOUND,
    default_load_bound,
    judge,
    load_average,
    median_step,
    round_order,
    round_ratios,
)
from trcomp_bench.runs import run_capped
from trcomp_bench.shared_round import NothingShared, Shared, engine_of, open_fresh, open_lineage
from trcomp_bench.shared_round import share as share_cache
from trcomp_bench.worker import RunSpec
from trcomp_bench.workloads import get_workload

__all__ = [
    "BenchOptions",
    "BenchResult",
    "RunFailed",
    "Runner",
    "default_backends",
    "run_benchmark",
    "run_measurement",
]

# Runs a spec in a subprocess with an environment; returns the worker's result dict.
Runner = Callable[[RunSpec, Mapping[str, str]], dict[str, Any]]


class RunFailed(RuntimeError):
    """A measurement subprocess failed; ``result`` holds what it reported."""

    def __init__(self, message: str, result: dict[str, Any]) -> None:
        super().__init__(message)
        self.result = result


@dataclass(frozen=True)
class BenchOptions:
    """What to benchmark. Defaults are what ``make bench`` runs."""

    workloads: tuple[str, ...] = ("gpt2", "bert", "mlp", "cnn")
    backends: tuple[str, ...] = ("eager", "inductor", "xla")
    size: str = "small"
    batch_size: int | None = None  # None: each workload's default
    steps: int = 30
    warmup: int = 5
    repeats: int = 2  # warm rounds after the cold one: ``rounds`` is 1 + repeats
    shared: bool = True  # the shared round: warm from a shared cache, another cache dir
    device: str = "auto"
    model: str | None = None  # a user's module:factory instead of the workloads
    lr: float = 1e-3
    timeout_s: float = 900.0
    load_bound: float | None = None  # None: the CPU count (rounds.default_load_bound)
    spread_bound: float = DEFAULT_SPREAD_BOUND

    @property
    def rounds(self) -> int:
        """Rounds of eager and each compiler in turn: the cold one and the warm ones."""
        return 1 + self.repeats

    def specs(self) -> list[RunSpec]:
        """One spec per (workload, backend), in workload order."""
        names = ("custom",) if self.model else self.workloads
        out = []
        for name in names:
            if self.model:
                batch = self.batch_size or 8
            else:
                batch = self.batch_size or get_workload(name).default_batch_size
            for backend in self.backends:
                get_backend(backend)
                out.append(RunSpec(
                    backend=backend, batch_size=batch, workload=name, model=self.model,
                    size=self.size, steps=self.steps, warmup=self.warmup, lr=self.lr,
                    device=self.device,
                ))  # fmt: skip
        return out


@dataclass
class BenchResult:
    """Rows (one per workload and backend that ran) and the errors of those that did not."""

    rows: list[Row] = field(default_factory=list)
    errors: dict[str, str] = field(default_factory=dict)


def default_backends() -> tuple[str, ...]:
    """eager and inductor, plus xla and jax where torch-xla and torchax are installed.

    Checked without importing them.
    """
    import importlib.util

    found = [name for name in ("torch_xla", "torchax") if importlib.util.find_spec(name)]
    extra = {"torch_xla": "xla", "torchax": "jax"}
    return ("eager", "inductor", *(extra[name] for name in found))


def _child_env(base: Mapping[str, str]) -> dict[str, str]:
    # The child must import this very trcomp_bench (and the trcomp beside it in a
    # checkout) and, for --model, the user's modules.
    package_root = str(Path(__file__).resolve().parents[1])
    paths = [package_root, os.getcwd(), *filter(None, base.get("PYTHONPATH", "").split(os.pathsep))]
    env = dict(base)
    env["PYTHONPATH"] = os.pathsep.join(dict.fromkeys(paths))
    env.setdefault("TOKENIZERS_PARALLELISM", "false")
    return env


def run_measurement(
    spec: RunSpec, env: Mapping[str, str], timeout_s: float = 900.0, python: str | None = None
) -> dict[str, Any]:
    """Run ``spec`` in a fresh ``python -m trcomp_bench.worker``; raise :class:`RunFailed`.

    ``python``: the interpreter (another torch version's); None: this one.
    """
    with tempfile.TemporaryDirectory(prefix="trcomp-run-") as tmp:
        spec_path, out_path = Path(tmp, "spec.json"), Path(tmp, "out.json")
        spec_path.write_text(spec.to_json())
        command = [
            python or sys.executable,
            "-m",
            "trcomp_bench.worker",
            str(spec_path),
            str(out_path),
        ]
        done = run_capped(command, timeout_s, env=_child_env(env))
        if done.timed_out:
            raise RunFailed(f"timed out after {timeout_s:.0f} s", {"oom": False})
        result: dict[str, Any] = json.loads(out_path.read_text()) if out_path.exists() else {}
    if done.returncode == 0 and "error" not in result:
        return result
    if done.returncode in (-9, 137):
        result = {"error": "killed by signal 9, probably out of memory", "oom": True}
    message = result.get("error") or f"exit {done.returncode}: {done.stderr.strip()[-800:]}"
    raise RunFailed(message, result)


def _label(spec: RunSpec) -> str:
    return spec.model or spec.workload


def _max_diff(losses: Iterable[list[float]], reference: list[float]) -> float:
    diffs = [abs(a - b) for run in losses for a, b in zip(run, reference, strict=False)]
    return max(diffs) if diffs else 0.0


@dataclass(frozen=True)
class _Measured:
    """What the rounds of one (workload, backend) gave: its runs and the load around each."""

    runs: list[dict[str, Any]]
    loads: list[list[float | None]]


def _row(
    spec: RunSpec,
    measured: _Measured,
    eager_measured: _Measured | None,
    shared: tuple[dict[str, Any] | None, dict[str, int]] | None,
    options: BenchOptions,
) -> Row:
    """Fold the cold run, the warm runs and the shared run of one (workload, backend)."""
    runs = measured.runs
    eager = eager_measured.runs if eager_measured else None
    round_steps = [median_step(run) for run in runs]
    ratios = None
    loads = [load for pair in measured.loads for load in pair]
    if eager_measured is not None and spec.backend != "eager":
        ratios = round_ratios([median_step(run) for run in eager_measured.runs], round_steps)
        loads += [load for pair in eager_measured.loads for load in pair]
    bound = default_load_bound() if options.load_bound is None else options.load_bound
    unreliable = judge(ratios, loads, load_bound=bound, spread_bound=options.spread_bound)
    steps = [t for run in runs for t in run["step_times_s"]]
    step_s = statistics.median(steps)
    warm = [run["first_step_s"] for run in runs[1:]]
    shared_run, shared_read = shared if shared else (None, None)
    max_diff = None
    if eager:
        own = [run["losses"] for run in runs]
        if spec.backend == "eager":
            max_diff = _max_diff(own[1:], own[0])  # determinism check: eager against itself
        else:
            extra = [shared_run["losses"]] if shared_run else []
            max_diff = _max_diff([*own, *extra], eager[0]["losses"])
    return Row(
        workload=_label(spec), backend=spec.backend, device=runs[0]["device"],
        batch_size=spec.batch_size, first_step_cold_s=runs[0]["first_step_s"],
        first_step_warm_s=statistics.median(warm) if warm else None, step_s=step_s,
        samples_per_s=spec.batch_size / step_s,
        peak_mem_mb=max(run["peak_mem_mb"] for run in runs), max_loss_diff=max_diff,
        first_step_shared_s=shared_run["first_step_s"] if shared_run else None,
        shared_read=shared_read, round_step_s=round_steps, round_load=measured.loads,
        vs_eager_rounds=ratios, unreliable=unreliable,
    )  # fmt: skip


@dataclass
class _Rounds:
    """The state of one benchmark run: where caches live, what ran, what failed."""

    root: Path
    run: Runner
    sharing: bool
    results: dict[RunSpec, _Measured]
    errors: dict[str, str] = field(default_factory=dict)
    lineage: dict[str, Shared] = field(default_factory=dict)
    shared: dict[RunSpec, tuple[dict[str, Any] | None, dict[str, int]]] = field(
        default_factory=dict
    )

    def lineage_run(self, spec: RunSpec, key: str, cold: bool) -> None:
        """A cold run (fresh cache dir) or a warm one (the cache dir the cold run filled)."""
        cache = self.root / _label(spec).replace(":", "_").replace("/", "_") / spec.backend
        env = backend_env(spec.backend, cache, os.environ)
        if self.sharing and engine_of(spec.backend):
            if cold:  # the first job: opens the (empty) shared location, as a job starts
                self.lineage[key] = open_lineage(self.root, key, spec.backend, cache, os.environ)
            env.update(self.lineage[key].environment)
        before = load_average()
        try:
            self.results[spec].runs.append(self.run(spec, env))
        except RunFailed as exc:
            self.errors[key] = str(exc)
            return
        self.results[spec].loads.append([before, load_average()])
        if cold and key in self.lineage:  # and shares what it compiled, as a job ends
            share_cache(self.lineage[key], cache)

    def shared_run(self, spec: RunSpec, key: str) -> None:
        """A fresh cache dir filled only from the shared location, and a run on it."""
        failed = f"{key} (shared round)"
        try:
            live, cache = open_fresh(self.lineage[key], self.root, key, spec.backend, os.environ)
        except NothingShared as exc:
            self.errors[failed] = str(exc)
            self.shared[spec] = (None, {"entries": 0, "files": 0, "bytes": 0})
            return
        facts = cache.facts
        read = {"entries": facts["entries_read"], "files": facts["files_read"]}
        read["bytes"] = facts["bytes_read"]
        env = backend_env(spec.backend, live, os.environ)
        env.update(cache.environment)
        try:
            result = self.run(spec, env)
        except RunFailed as exc:
            self.errors[failed] = str(exc)
            self.shared[spec] = (None, read)
            return
        if "fxgraph_cache" in result:
            read["fxgraph_hits"] = result["fxgraph_cache"]["hit"]
            read["fxgraph_misses"] = result["fxgraph_cache"]["miss"]
        self.shared[spec] = (result, read)


def run_benchmark(
    options: BenchOptions,
    progress: bool = True,
    runner: Runner | None = None,
) -> BenchResult:
    """Measure every (workload, backend) of ``options``; failures become ``errors``.

    ``runner`` replaces :func:`run_measurement` (tests). The compile caches, and
    the shared caches of the shared round, live in a temporary directory removed
    at the end. A shared round that fails (its read found nothing, or its run
    failed) keeps the row, without its shared time, and adds an error
    ``"<workload>/<backend> (shared round)"``.
    """
    from tqdm import tqdm

    specs = options.specs()
    run = runner or (lambda s, e: run_measurement(s, e, options.timeout_s))
    by_workload: dict[str, list[RunSpec]] = {}
    for spec in specs:
        by_workload.setdefault(_label(spec), []).append(spec)
    rounds = options.rounds
    sharing = [spec for spec in specs if options.shared and engine_of(spec.backend)]
    with tempfile.TemporaryDirectory(prefix="trcomp-bench-") as tmp:
        measured = {spec: _Measured([], []) for spec in specs}
        state = _Rounds(Path(tmp), run, options.shared, measured)
        total = rounds * len(specs) + len(sharing)
        bar = tqdm(total=total, disable=not progress, file=sys.stderr, unit="run")
        with bar:
            for round_no in range(rounds):
                for workload, group in by_workload.items():
                    for spec in round_order(group, round_no):
                        key = f"{workload}/{spec.backend}"
                        bar.set_description(f"{key} {'cold' if round_no == 0 else 'warm'}")
                        if key not in state.errors:
                            state.lineage_run(spec, key, cold=round_no == 0)
                        bar.update(1)
            for workload, group in by_workload.items():
                for spec in round_order([s for s in group if s in sharing], rounds):
                    key = f"{workload}/{spec.backend}"
                    bar.set_description(f"{key} shared")
                    if key not in state.errors:
                        state.shared_run(spec, key)
                    bar.update(1)
    rows = []
    errors = state.errors
    for group in by_workload.values():
        eager = next((state.results[s] for s in group if s.backend == "eager"), None)
        eager = eager if eager and f"{_label(group[0])}/eager" not in errors else None
        for spec in group:
            if f"{_label(spec)}/{spec.backend}" not in errors:
                shared = state.shared.get(spec)
                rows.append(_row(spec, state.results[spec], eager, shared, options))
    return BenchResult(rows, errors)
