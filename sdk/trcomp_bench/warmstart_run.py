"""The warm-start benchmark's runs: each kind's job environment, the interleaved rounds.

What each kind (:data:`KINDS`) measures, and why, is in :mod:`trcomp_bench.warmstart`,
the command line. :func:`run_warmstart` runs every kind of every (torch version,
workload) in interleaved rounds, each run a zero-code job under the environment the
container's entrypoint builds (:func:`run_env`), on the interpreter of its torch
version (:func:`trcomp_bench.versions.python_for`); the cold runs' cache dirs are
shared with the warm runs that follow. Nothing here imports torch.
"""

from __future__ import annotations

import os
import shutil
import tempfile
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from trcomp.contract.env import PREFIX
from trcomp_bench.rounds import load_average, median_step, round_order
from trcomp_bench.versions import python_for

__all__ = [
    "AOT_KINDS",
    "KINDS",
    "WarmOptions",
    "Worker",
    "has_aot",
    "run_env",
    "run_warmstart",
]

KINDS = ("eager", "cold", "cold_fx", "fx", "aot")
"""The runs of one (version, workload) in one round, in the order they run."""
AOT_KINDS = ("cold_fx", "aot")
"""The kinds only a torch with ``aot_compile`` runs (elsewhere ``cold`` is the normal path)."""
_RECORD_GLOB = "rank*-pid*.json"
_TIMEOUT_S = 1200.0

# Runs one worker spec on an interpreter with an environment; returns its result dict.
Worker = Callable[[str, Any, Mapping[str, str]], dict[str, Any]]


@dataclass(frozen=True)
class WarmOptions:
    """What to measure. The defaults are small: the demo model and two reference workloads."""

    versions: tuple[str, ...] = ("2.9", "2.14")
    workloads: tuple[str, ...] = ("tiny_lm", "mlp", "gpt2")
    size: str = "tiny"
    steps: int = 12
    warmup: int = 4
    rounds: int = 2
    cold_rounds: int = 1  # rounds with a cold run; later rounds warm from the last one's cache
    budget_s: float | None = None  # no run starts after this many seconds (None: no limit)


def has_aot(version: str) -> bool:
    """Whether torch ``version`` (``2.14``, ``2.14.1+cpu``) has ``aot_compile`` (2.14 on)."""
    from trcomp.contract.config import torch_has_aot

    return torch_has_aot(version)


def run_env(kind: str, *, job: Path, cache: Path, base_env: Mapping[str, str]) -> dict[str, str]:
    """The environment the entrypoint gives a job's script for run ``kind`` (:data:`KINDS`).

    ``job`` holds the run's /opt/ml tree (its records land in ``job/output``);
    ``cache`` is its compile cache dir (``TRCOMP_CACHE_DIR``).
    """
    from trcomp import TrainingCompilerConfig
    from trcomp_container.backends import resolve_backend, resolve_engine
    from trcomp_container.devices import Devices
    from trcomp_container.environment import build_environment
    from trcomp_container.job import JobPaths

    if kind not in KINDS:
        raise ValueError(f"unknown run kind {kind!r}: one of {', '.join(KINDS)}")
    if kind == "eager":
        config = TrainingCompilerConfig(enabled=False)
    else:  # no eager window, no keep-faster switch: every step after the first compiled
        config = TrainingCompilerConfig(
            backend="inductor",
            measure_speedup=False,
            keep_faster=False,
            aot=kind not in ("cold_fx", "fx"),
        )
    paths = JobPaths.under(job)
    for directory in (paths.model, paths.output_data, paths.code):
        directory.mkdir(parents=True, exist_ok=True)
    devices = Devices()
    backend = resolve_backend(config, devices)
    return build_environment(
        config=config,
        backend=backend,
        engine=resolve_engine(config, backend, devices),
        devices=devices,
        paths=paths,
        base_env=base_env,
        metrics_dir=paths.output / "data" / "compiler" / "ranks",
        cache_dir=cache,
        scratch_dir=job / "scratch",
    )


def _base_env(environ: Mapping[str, str]) -> dict[str, str]:
    # A job's own settings come from its config, not from the shell the bench runs in.
    leaky = ("SM_", "SAGEMAKER_", "TORCHINDUCTOR_", "TORCH_COMPILE", "XLA_", "PJRT_")
    env = {
        k: v
        for k, v in environ.items()
        if not k.startswith(leaky) and not (k.startswith(PREFIX) and "PYTHON" not in k)
    }
    env["TORCHINDUCTOR_COMPILE_THREADS"] = "1"  # what the tests use on this 2-core machine
    return env


def _hook_record(job: Path) -> dict[str, Any]:
    import json

    found = sorted((job / "output" / "data" / "compiler" / "ranks").glob(_RECORD_GLOB))
    if not found:
        return {}
    record: dict[str, Any] = json.loads(found[0].read_text())
    modules = (record.get("autocompile") or {}).get("modules") or []
    aot = modules[0].get("aot") if modules else None
    events = (record.get("compile") or {}).get("events")
    return {"aot": aot, "compile_events": events}


def _default_worker(python: str, spec: Any, env: Mapping[str, str]) -> dict[str, Any]:
    from trcomp_bench.harness import run_measurement

    return run_measurement(spec, env, timeout_s=_TIMEOUT_S, python=python)


def _measure(
    kind: str, spec: Any, python: str, job: Path, cache: Path, worker: Worker
) -> dict[str, Any]:
    from trcomp_bench.harness import RunFailed

    env = run_env(kind, job=job, cache=cache, base_env=_base_env(os.environ))
    before = load_average()
    try:
        result = worker(python, spec, env)
    except RunFailed as exc:
        result = {"error": str(exc)}
    after = load_average()
    run: dict[str, Any] = {"kind": kind, "load": [before, after], **_hook_record(job)}
    if "error" in result:
        return {**run, "error": result["error"]}
    return {
        **run,
        "torch": result.get("torch"),
        "first_s": result.get("first_compiled_step_s"),
        "step_s": median_step(result),
        "fxgraph_cache": result.get("fxgraph_cache"),
        "losses": result["losses"],
    }


def run_warmstart(
    options: WarmOptions,
    *,
    worker: Worker = _default_worker,
    log: Callable[[str], None] = lambda line: print(line, flush=True),
    environ: Mapping[str, str] | None = None,
    progress: Callable[[list[dict[str, Any]]], object] | None = None,
) -> list[dict[str, Any]]:
    """Every run of every round, each a dict with ``version``, ``workload``, ``round`` and
    ``kind``; the interleaving is :func:`~trcomp_bench.rounds.round_order`'s over the
    (workload, version) pairs, so a workload's versions run back to back.

    ``progress`` gets the runs so far after every run (to write them as they come);
    once ``options.budget_s`` is spent no run starts, and the runs so far are returned.
    """
    from trcomp_bench.worker import RunSpec
    from trcomp_bench.workloads import get_workload

    pythons = {version: python_for(version, environ) for version in options.versions}
    pairs = [(v, w) for w in options.workloads for v in options.versions]
    deadline = None if options.budget_s is None else time.monotonic() + options.budget_s
    runs: list[dict[str, Any]] = []
    # The last cold run's cache dir per (version, workload, kind of cold run).
    caches: dict[tuple[str, str, str], Path] = {}
    with tempfile.TemporaryDirectory(prefix="trcomp-warmstart-") as tmp:
        for round_no in range(options.rounds):
            for version, workload in round_order(pairs, round_no):
                root = Path(tmp, f"r{round_no}-{version}-{workload}")
                fx_cache = root / "fx-cache"
                kinds = [k for k in KINDS if k not in AOT_KINDS or has_aot(version)]
                colds = [k for k in kinds if k.startswith("cold")]
                for cold in colds:
                    if round_no < options.cold_rounds or (version, workload, cold) not in caches:
                        caches[version, workload, cold] = root / f"cache-{cold}"
                    else:  # a cold compile costs minutes here: later rounds reuse the last's
                        kinds.remove(cold)
                cache = caches[version, workload, "cold"]
                fx_source = caches[version, workload, colds[-1]]  # the normal path's
                if round_no % 2:  # eager last every other round: eager and compiled trade places
                    kinds = [*kinds[1:], kinds[0]]
                for kind in kinds:
                    if deadline is not None and time.monotonic() > deadline:
                        log(f"budget of {options.budget_s:g} s spent: no more runs")
                        return runs
                    if kind == "fx":  # the normal path's FX-graph cache, without AOT artifacts
                        fx_source.mkdir(parents=True, exist_ok=True)  # a failed cold run: none
                        shutil.copytree(fx_source, fx_cache, ignore=shutil.ignore_patterns("aot"))
                    spec = RunSpec(
                        backend="eager" if kind == "eager" else "inductor",
                        batch_size=get_workload(workload).default_batch_size,
                        workload=workload,
                        size=options.size,
                        steps=options.steps,
                        warmup=options.warmup,
                        zero_code=kind != "eager",
                    )
                    job = root / f"job-{kind}"
                    where = {"fx": fx_cache, "cold_fx": fx_source}.get(kind, cache)
                    run = _measure(kind, spec, pythons[version], job, where, worker)
                    run.update(version=version, workload=workload, round=round_no)
                    runs.append(run)
                    log(_describe(run))
                    if progress is not None:
                        progress(runs)
    return runs


def _describe(run: dict[str, Any]) -> str:
    head = f"round {run['round']} torch {run['version']} {run['workload']} {run['kind']}:"
    if "error" in run:
        return f"{head} FAILED {run['error']}"
    first = "" if run["first_s"] is None else f" first {run['first_s']:.2f} s"
    path = f" aot={run['aot']['path']}" if run.get("aot") else ""
    return f"{head}{first} step {run['step_s'] * 1e3:.1f} ms{path} load {run['load']}"
