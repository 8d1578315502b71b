"""What checking compiled modules against eager costs a job: ``verify=True`` against ``False``.

Each workload runs as a real process-mode job (``trcomp.PyTorch``,
``instance_type="local_process"``, ``TrainingCompilerConfig()``) twice per
round, with ``verify`` on and off, the order alternating between rounds, each
job with its own empty compile cache (so both compile cold). Two ways a model
gets compiled are measured: ``gpt2`` is an unmodified loop the start-up hook
compiles (the zero-code path), ``tiny_lm`` the demo job's model compiled by
the script through ``trcomp.runtime.compile`` (the demo's path). From each
job's summary: the calls run both ways and their seconds, the compile time,
the first step after start and the whole job. Prints, and with ``--json``
writes, a ``recorded`` table (:mod:`trcomp_bench.doctables`)::

    python -m trcomp_bench.verify_cost --rounds 2 --json out.json
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from trcomp_bench.results import write_recorded
from trcomp_bench.speedup_jobs import JOB_SCRIPT, run_job

__all__ = ["RUNTIME_SCRIPT", "main", "measure"]

RUNTIME_SCRIPT = JOB_SCRIPT.replace(
    "from trcomp_bench.workloads", "from trcomp import runtime\nfrom trcomp_bench.workloads"
).replace("model.train()", "model = runtime.compile(model)\nmodel.train()")
SCRIPTS = {"gpt2": JOB_SCRIPT, "tiny_lm": RUNTIME_SCRIPT}
HOW = {"gpt2": "zero-code path", "tiny_lm": "trcomp.runtime.compile, the demo's path"}


def measure(workload: str, *, steps: int = 20, rounds: int = 1) -> dict[str, Any]:
    """The figures of ``rounds`` pairs of jobs (verify on, off) on ``workload``."""
    from trcomp import TrainingCompilerConfig

    jobs: dict[bool, list[dict[str, Any]]] = {True: [], False: []}
    with tempfile.TemporaryDirectory(prefix="trcomp-verify-cost-") as tmp:
        for number in range(rounds):
            for verify in (True, False) if number % 2 == 0 else (False, True):
                summary = run_job(
                    Path(tmp) / f"{workload}-{number}-{verify}",
                    SCRIPTS[workload],
                    {"workload": workload, "steps": steps},
                    TrainingCompilerConfig(verify=verify),
                )
                jobs[verify].append(_figures(summary))
                print(f"[verify-cost] {workload} verify={verify}: {jobs[verify][-1]}", flush=True)
    return {
        "checked": jobs[True],
        "unchecked": jobs[False],
        "median": {
            f"{name} {key}": statistics.median(job[key] for job in runs)
            for name, runs in (("checked", jobs[True]), ("unchecked", jobs[False]))
            for key in ("compile_s", "first_step_s", "job_s")
        },
    }


def _figures(summary: dict[str, Any]) -> dict[str, Any]:
    # No module entry with verify=False under trcomp.runtime.compile (nothing to check).
    modules = summary["ranks"][0]["autocompile"]["modules"] or [{}]
    metrics = summary["metrics"]
    return {
        "verified": modules[0].get("verified"),
        "verified_calls": modules[0].get("verified_calls", 0),
        "verify_s": modules[0].get("verify_s", 0.0),
        "compile_s": metrics["compile_time_s"],
        "first_step_s": metrics["first_step_s"],
        "job_s": summary["duration_s"],
    }


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of ``python -m trcomp_bench.verify_cost``."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--workloads", nargs="+", default=list(SCRIPTS), choices=list(SCRIPTS))
    parser.add_argument("--steps", type=int, default=20)
    parser.add_argument("--rounds", type=int, default=1)
    parser.add_argument("--json", type=Path)
    parser.add_argument("--source", default="", help="how and where it ran, for the table")
    args = parser.parse_args(None if argv is None else list(argv))
    rows = []
    for workload in args.workloads:
        got = measure(workload, steps=args.steps, rounds=args.rounds)
        checked, median = got["checked"], got["median"]
        rows.append(
            [
                f"{workload} ({HOW[workload]})",
                str(len(checked)),
                "; ".join(
                    f"{job['verified_calls']} calls, {job['verify_s']:.1f} s "
                    f"({job['verify_s'] - job['compile_s']:.1f} s more than compiling)"
                    for job in checked
                ),
                *(
                    f"{median[f'checked {key}']:.1f} / {median[f'unchecked {key}']:.1f}"
                    for key in ("compile_s", "first_step_s", "job_s")
                ),
                f"{median['checked job_s'] / median['unchecked job_s']:.3f}",
            ]
        )
    header = [
        "workload",
        "pairs of jobs",
        "checked: calls run both ways, their seconds",
        "compile s, verify on / off",
        "first step s, on / off",
        "job s, on / off",
        "job on / off",
    ]
    write_recorded(header, rows, args.source, args.json)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
