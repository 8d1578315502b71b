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
start-up hook compiles it, and with a cache dir its AOT code (``trcomp_container.inprocess.aot``)
saves or loads the artifact. The hook's record of each run says which path ran
(``saved``, ``loaded``, ``compiled``) and the FX-graph cache's hits and misses
come from inductor's counters: the table shows them beside the times.

A version runs on the interpreter a process-mode job of that
``framework_version`` runs on (:func:`trcomp_bench.versions.python_for`: this
one when its torch matches, else ``TRCOMP_PROCESS_PYTHON_<MAJOR>_<MINOR>``).
The hook compiles during the second step (the first runs eager), so "first
step" here is that step: :func:`trcomp_bench.worker.measure`'s
``first_compiled_step_s``. This module is the command line; the runs are
:mod:`trcomp_bench.warmstart_run`'s (:func:`run_warmstart`, :func:`run_env`),
folding and the table pure functions of them in :mod:`trcomp_bench.warmstart_table`
(:func:`fold`, :func:`markdown_table`); nothing here imports torch.
"""

from __future__ import annotations

import argparse
import datetime
import os
import subprocess
from dataclasses import asdict
from pathlib import Path
from typing import Any

from trcomp_bench.rounds import default_load_bound, load_average
from trcomp_bench.warmstart_run import (
    AOT_KINDS,
    KINDS,
    WarmOptions,
    has_aot,
    run_env,
    run_warmstart,
)
from trcomp_bench.warmstart_table import NO_AOT, fold, markdown_table

__all__ = [
    "AOT_KINDS",
    "KINDS",
    "NO_AOT",
    "WarmOptions",
    "fold",
    "has_aot",
    "main",
    "markdown_table",
    "run_env",
    "run_warmstart",
]


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
