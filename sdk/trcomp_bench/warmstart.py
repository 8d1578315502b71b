"""Warm starts per torch version: first step cold, warm from the FX-graph cache, warm from AOT.

``python -m trcomp_bench.warmstart --torch-versions 2.9,2.14`` measures, for each
(torch version, workload), in one run of interleaved rounds:

- ``eager``: the compiler off, the steady step every ratio is against;
- ``cold``: the first compiled step with an empty compile cache (default config:
  on torch >= 2.14 this run also compiles ahead of time and saves the artifact),
  in the first ``cold_rounds`` rounds; later rounds warm from the last cold
  run's cache dir (a cold compile takes minutes on a small CPU machine);
- ``cold_fx`` (torch >= 2.14 only): cold too, with ``aot=False``: the normal
  ``torch.compile`` path, which writes the FX-graph cache entries an ahead-of-time
  compile does not write;
- ``fx``: warm from inductor's FX-graph cache, no AOT artifact: ``aot=False`` on
  a copy of the cache dir of the last cold run of the normal path (``cold_fx``
  where there is one, else ``cold``), without its ``aot/`` folder;
- ``aot``: warm from the AOT artifact: the cold run's cache dir as it is (torch
  >= 2.14 only; torch 2.9 has no ``aot_compile``).

Every compiled run is the zero-code path of a real job: the worker
(:mod:`trcomp_bench.worker`, ``zero_code``) trains the plain model under the
environment the container's entrypoint builds (``build_environment``), so the
start-up hook compiles it, and with a cache dir its AOT code (``trcomp_aot``)
saves or loads the artifact. The hook's record of each run says which path ran
(``saved``, ``loaded``, ``compiled``) and the FX-graph cache's hits and misses
come from inductor's counters: the table shows them beside the times.

A version runs on the interpreter a process-mode job of that
``framework_version`` runs on (:func:`trcomp_bench.versions.python_for`: this
one when its torch matches, else ``TRCOMP_PROCESS_PYTHON_<MAJOR>_<MINOR>``).
The hook compiles during the second step (the first runs eager), so "first
step" here is that step: :func:`trcomp_bench.worker.measure`'s
``first_compiled_step_s``. Folding and the table are pure functions
(:func:`fold`, :func:`markdown_table`); nothing here imports torch.
"""

from __future__ import annotations

import argparse
import datetime
import os
import shutil
import statistics
import subprocess
import tempfile
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from trcomp_bench.rounds import (
    default_load_bound,
    judge,
    load_average,
    median_step,
    ratio_and_spread,
    round_order,
    round_ratios,
)
from trcomp_bench.versions import python_for

__all__ = [
    "AOT_KINDS",
    "KINDS",
    "WarmOptions",
    "fold",
    "has_aot",
    "main",
    "markdown_table",
    "run_env",
    "run_warmstart",
]

KINDS = ("eager", "cold", "cold_fx", "fx", "aot")
"""The runs of one (version, workload) in one round, in the order they run."""
AOT_KINDS = ("cold_fx", "aot")
"""The kinds only a torch with ``aot_compile`` runs (elsewhere ``cold`` is the normal path)."""
NO_AOT = "n/a (torch {version} has no aot_compile)"
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
    from trcomp_container.backends import resolve_backend
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
    return build_environment(
        config=config,
        backend=resolve_backend(config, devices),
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
        if not k.startswith(leaky) and not (k.startswith("TRCOMP_") and "PYTHON" not in k)
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


def _median(values: Sequence[float | None]) -> float | None:
    known = [v for v in values if v is not None]
    return float(statistics.median(known)) if known else None


def _load_range(loads: Sequence[float | None]) -> list[float] | None:
    known = [load for load in loads if load is not None]
    return [min(known), max(known)] if known else None


def _max_diff(runs: Sequence[dict[str, Any]], eager: Sequence[dict[str, Any]]) -> float | None:
    reference = {run["round"]: run["losses"] for run in eager}
    diffs = [
        abs(a - b)
        for run in runs
        if run["round"] in reference
        for a, b in zip(run["losses"], reference[run["round"]], strict=False)
    ]
    return max(diffs) if diffs else None


def fold(
    runs: Sequence[dict[str, Any]], *, load_bound: float | None = None
) -> list[dict[str, Any]]:
    """One row per (version, workload): medians over rounds, per-round ratios, the paths.

    ``first_*_s`` are the median first compiled steps of the cold, FX-warm and
    AOT-warm runs, ``first_cold_fx_s`` the cold ones of the normal path (torch
    >= 2.14; elsewhere ``cold`` is that path); ``eager_step_s`` and ``step_s``
    the median steady steps of the eager runs and of the compiled ones (all
    kinds: the steady step
    does not depend on how the run started); ``vs_eager_rounds`` each round's
    eager step over its compiled step; ``paths`` which path each kind's runs
    took (the hook's record); ``fx_hits``/``fx_misses`` the FX-graph cache's
    counters summed over the ``fx`` runs.
    """
    bound = default_load_bound() if load_bound is None else load_bound
    keys = list(dict.fromkeys((run["version"], run["workload"]) for run in runs))
    rows = []
    for version, workload in keys:
        mine = [r for r in runs if (r["version"], r["workload"]) == (version, workload)]
        good = [r for r in mine if "error" not in r]
        by_kind = {kind: [r for r in good if r["kind"] == kind] for kind in KINDS}
        compiled = [r for r in good if r["kind"] != "eager"]
        rounds = sorted({r["round"] for r in good})
        eager_steps, steps = [], []
        for round_no in rounds:
            eager = [r["step_s"] for r in by_kind["eager"] if r["round"] == round_no]
            comp = [r["step_s"] for r in compiled if r["round"] == round_no]
            if eager and comp:
                eager_steps.append(statistics.median(eager))
                steps.append(statistics.median(comp))
        ratios = round_ratios(eager_steps, steps)
        loads = [load for r in mine for load in r["load"]]
        fx = [r.get("fxgraph_cache") or {} for r in by_kind["fx"]]
        rows.append(
            {
                "version": version,
                "torch": next((r["torch"] for r in good if r.get("torch")), None),
                "workload": workload,
                "aot_applies": has_aot(version),
                "first_cold_s": _median([r["first_s"] for r in by_kind["cold"]]),
                "first_cold_fx_s": _median([r["first_s"] for r in by_kind["cold_fx"]]),
                "first_fx_s": _median([r["first_s"] for r in by_kind["fx"]]),
                "first_aot_s": _median([r["first_s"] for r in by_kind["aot"]]),
                "eager_step_s": _median([r["step_s"] for r in by_kind["eager"]]),
                "step_s": _median([r["step_s"] for r in compiled]),
                "vs_eager_rounds": ratios,
                "max_loss_diff": _max_diff(compiled, by_kind["eager"]),
                "paths": {
                    kind: sorted(
                        {(r.get("aot") or {}).get("path") or "none" for r in by_kind[kind]}
                    )
                    for kind in KINDS[1:]
                    if kind not in AOT_KINDS or has_aot(version)
                },
                "fx_hits": sum(int(c.get("hit", 0)) for c in fx),
                "fx_misses": sum(int(c.get("miss", 0)) for c in fx),
                "load": _load_range(loads),
                "not_run": [
                    kind
                    for kind in KINDS
                    if (kind not in AOT_KINDS or has_aot(version))
                    and not any(r["kind"] == kind for r in mine)
                ],
                "errors": [
                    f"{r['kind']} (round {r['round']}): {r['error']}" for r in mine if "error" in r
                ],
                "unreliable": judge(ratios, loads, load_bound=bound),
            }
        )
    return rows


def _secs(value: float | None) -> str:
    return "not measured" if value is None else f"{value:.1f} s"


def _ms(value: float | None) -> str:
    return "not measured" if value is None else f"{value * 1e3:.2f} ms"


def _path(row: dict[str, Any], kind: str) -> str:
    return "/".join(row["paths"].get(kind) or ["none"])


def markdown_table(data: dict[str, Any]) -> str:
    """The folded rows (``data["rows"]``) as the docs' table.

    Each first-step cell names the path the hook's record says ran; "vs eager"
    is the median of the rounds' ratios with their range and count; "flags"
    holds :func:`~trcomp_bench.rounds.judge`'s verdict and any failed run.
    """
    from trcomp_bench.results import table

    header = [
        "torch", "workload", "first step, cold", "cold, aot=False", "warm, FX-graph cache",
        "warm, AOT artifact",
        "eager step", "compiled step", "vs eager (range, rounds)", "max loss diff vs eager",
        "load (1 min)", "flags",
    ]  # fmt: skip
    lines = []
    for row in data["rows"]:
        no_aot = NO_AOT.format(version=row["version"])
        aot = f"{_secs(row['first_aot_s'])} ({_path(row, 'aot')})" if row["aot_applies"] else no_aot
        cold_fx = _secs(row.get("first_cold_fx_s")) if row["aot_applies"] else "the cold column"
        fx_cache = f"hits {row['fx_hits']}, misses {row['fx_misses']}"
        if row["vs_eager_rounds"]:
            mid, low, high = ratio_and_spread(row["vs_eager_rounds"])
            ratio = f"{mid:.2f}x ({low:.2f}-{high:.2f}, {len(row['vs_eager_rounds'])})"
        else:
            ratio = "n/a"
        diff = "n/a" if row["max_loss_diff"] is None else f"{row['max_loss_diff']:.1e}"
        load = "n/a" if not row["load"] else f"{row['load'][0]:.1f}-{row['load'][1]:.1f}"
        not_run = row.get("not_run") and f"not run: {', '.join(row['not_run'])} (budget spent)"
        flags = "; ".join(filter(None, [row["unreliable"], not_run, *row["errors"]])) or "none"
        lines.append(
            [
                row["torch"] or row["version"],
                row["workload"],
                f"{_secs(row['first_cold_s'])} ({_path(row, 'cold')})",
                cold_fx,
                f"{_secs(row['first_fx_s'])} ({fx_cache})",
                aot,
                _ms(row["eager_step_s"]),
                _ms(row["step_s"]),
                ratio,
                diff,
                load,
                flags,
            ]
        )
    return table(header, lines)


def _commit() -> str | None:
    here = Path(__file__).resolve().parent
    done = subprocess.run(
        ["git", "-C", str(here), "rev-parse", "--short", "HEAD"],
        capture_output=True,
        text=True,
        check=False,
    )
    return done.stdout.strip() or None


def main(argv: list[str] | None = None) -> int:
    """Command line: measure, write the JSON (runs, rows, conditions) and the table."""
    import json

    from trcomp_bench.results import write_text

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    defaults = WarmOptions()
    parser.add_argument("--torch-versions", default=",".join(defaults.versions))
    parser.add_argument("--workloads", default=",".join(defaults.workloads))
    parser.add_argument("--size", default=defaults.size, choices=("tiny", "small"))
    parser.add_argument("--steps", type=int, default=defaults.steps)
    parser.add_argument("--warmup", type=int, default=defaults.warmup)
    parser.add_argument("--rounds", type=int, default=defaults.rounds)
    parser.add_argument(
        "--cold-rounds",
        type=int,
        default=defaults.cold_rounds,
        help="rounds that start cold; the later ones warm from the last cold run's cache",
    )
    parser.add_argument(
        "--budget-s", type=float, help="start no run after this many seconds (default: none)"
    )
    parser.add_argument(
        "--json", type=Path, help="write runs, rows and conditions here, after every run"
    )
    parser.add_argument("--markdown", type=Path, help="write the table here")
    args = parser.parse_args(argv)
    options = WarmOptions(
        versions=tuple(filter(None, args.torch_versions.split(","))),
        workloads=tuple(filter(None, args.workloads.split(","))),
        size=args.size,
        steps=args.steps,
        warmup=args.warmup,
        rounds=args.rounds,
        cold_rounds=args.cold_rounds,
        budget_s=args.budget_s,
    )
    conditions = {
        "started": _now(),
        "commit": _commit(),
        "cpus": os.cpu_count(),
        "load_before": load_average(),
        "load_bound": default_load_bound(),
        "options": asdict(options),
    }

    def write(runs: list[dict[str, Any]]) -> dict[str, Any]:
        data = {
            "conditions": {**conditions, "last_run_ended": _now(), "load_now": load_average()},
            "rows": fold(runs),
            "runs": runs,
        }
        if args.json:
            write_text(args.json, json.dumps(data, indent=2) + "\n")
        if args.markdown:
            write_text(args.markdown, markdown_table(data))
        return data

    data = write(run_warmstart(options, progress=write))
    print(markdown_table(data))
    return 0


def _now() -> str:
    return datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds")


if __name__ == "__main__":
    raise SystemExit(main())
