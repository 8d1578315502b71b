"""What checking compiled modules against eager costs a job: time and memory, side by side.

Each workload runs as a real process-mode job (``trcomp.PyTorch``,
``instance_type="local_process"``) three times per round: the compiler off, the
default config with ``verify=False`` and with ``verify=True``, the order rotating
between rounds, each job with its own empty compile cache (so both compiled jobs
compile cold). Three ways a model gets compiled are measured: ``gpt2`` is an
unmodified loop the start-up hook compiles (the zero-code path), ``tiny_lm`` the
demo job's model compiled by the script through ``trcomp.runtime.compile`` (the
demo's path), ``heavy`` an activation-heavy MLP (wide layers, a large batch)
through the zero-code path, whose script also measures one forward's
activations (the bytes autograd saves for backward). From each job's summary:
the graphs checked and the check's own seconds (without the compile inside it),
the compile time, the first step, the whole job; from each training process its
peak RSS. Prints, and with ``--json`` writes, a ``recorded`` table
(:mod:`trcomp_bench.doctables`)::

    python -m trcomp_bench.verify_cost --rounds 3 --json out.json
"""

from __future__ import annotations

import argparse
import json
import statistics
import tarfile
import tempfile
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from trcomp_bench.results import write_recorded
from trcomp_bench.speedup_jobs import JOB_SCRIPT, run_job

__all__ = ["HEAVY_SCRIPT", "RUNTIME_SCRIPT", "main", "measure"]

_PEAK = """
import json as _json, os as _os, resource as _resource
with open(_os.path.join(_os.environ.get("SM_OUTPUT_DATA_DIR", "."), "peak.json"), "w") as _f:
    _json.dump({"peak_rss_mb": _resource.getrusage(_resource.RUSAGE_SELF).ru_maxrss / 1024,
                "activations_mb": globals().get("ACTIVATIONS_MB")}, _f)
"""
HEAVY_SCRIPT = (
    '''"""An activation-heavy plain loop: wide layers, a large batch, few parameters."""
import argparse
import torch
from torch import nn

parser = argparse.ArgumentParser()
parser.add_argument("--workload", default="heavy")
parser.add_argument("--steps", type=int, default=20)
args = parser.parse_args()
torch.manual_seed(0)
model = nn.Sequential(*(m for _ in range(6) for m in (nn.Linear(512, 512), nn.GELU())))
optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)
saved = []
with torch.autograd.graph.saved_tensors_hooks(
    lambda t: saved.append(t.numel() * t.element_size()) or t, lambda t: t
):
    model(torch.randn(4096, 512)).pow(2).mean()  # one forward's activations, measured
ACTIVATIONS_MB = sum(saved) / 2**20
for step in range(args.steps):
    generator = torch.Generator().manual_seed(step)
    loss = model(torch.randn(4096, 512, generator=generator)).pow(2).mean()
    loss.backward()
    optimizer.step()
    optimizer.zero_grad(set_to_none=True)
'''
    + _PEAK
)
RUNTIME_SCRIPT = JOB_SCRIPT.replace(
    "from trcomp_bench.workloads", "from trcomp import runtime\nfrom trcomp_bench.workloads"
).replace("model.train()", "model = runtime.compile(model)\nmodel.train()")
SCRIPTS = {"gpt2": JOB_SCRIPT + _PEAK, "tiny_lm": RUNTIME_SCRIPT + _PEAK, "heavy": HEAVY_SCRIPT}
HOW = {
    "gpt2": "zero-code path",
    "tiny_lm": "trcomp.runtime.compile, the demo's path",
    "heavy": "zero-code path, activation-heavy",
}
JOBS = ("off", "unchecked", "checked")
"""Per round: the compiler off, the default config with ``verify=False``, and with it."""


def measure(workload: str, *, steps: int = 20, rounds: int = 1) -> dict[str, Any]:
    """The figures of ``rounds`` rounds of jobs (:data:`JOBS`, the order rotating) on
    ``workload``."""
    from trcomp import TrainingCompilerConfig

    configs = {
        "off": TrainingCompilerConfig(enabled=False),
        "unchecked": TrainingCompilerConfig(verify=False),
        "checked": TrainingCompilerConfig(verify=True),
    }
    jobs: dict[str, list[dict[str, Any]]] = {name: [] for name in JOBS}
    with tempfile.TemporaryDirectory(prefix="trcomp-verify-cost-") as tmp:
        for number in range(rounds):
            order = JOBS[number % 3 :] + JOBS[: number % 3]
            for name in order:
                work = Path(tmp) / f"{workload}-{number}-{name}"
                summary = run_job(
                    work, SCRIPTS[workload], {"workload": workload, "steps": steps}, configs[name]
                )
                jobs[name].append({**_figures(summary), **_peak(work)})
                print(f"[verify-cost] {workload} {name}: {jobs[name][-1]}", flush=True)
    return {
        **jobs,
        "median": {
            f"{name} {key}": _median(job.get(key) for job in runs)
            for name, runs in jobs.items()
            for key in ("verify_s", "compile_s", "first_step_s", "job_s", "peak_rss_mb")
        },
    }


def _median(values: Any) -> float | None:
    found = [value for value in values if value is not None]
    return statistics.median(found) if found else None


def _peak(work: Path) -> dict[str, Any]:
    """What the script wrote about its memory (peak.json in the job's output data)."""
    for tar_path in sorted(work.glob("output/**/output.tar.gz")):
        with tarfile.open(tar_path) as tar:
            member = next((m for m in tar.getmembers() if m.name.endswith("peak.json")), None)
            extracted = tar.extractfile(member) if member is not None else None
            if extracted is not None:
                return dict(json.load(extracted))
    return {}


def _figures(summary: dict[str, Any]) -> dict[str, Any]:
    # No module entry with verify=False under trcomp.runtime.compile, or compiler off.
    ranks = summary.get("ranks") or [{}]
    modules = (ranks[0].get("autocompile") or {}).get("modules") or [{}]
    metrics = summary.get("metrics") or {}
    return {
        "verified": modules[0].get("verified"),
        "verified_calls": modules[0].get("verified_calls", 0),
        "verify_s": modules[0].get("verify_s", 0.0),
        "verify_compile_s": modules[0].get("verify_compile_s", 0.0),
        "compile_s": metrics.get("compile_time_s"),
        "first_step_s": metrics.get("first_step_s"),
        "job_s": summary["duration_s"],
    }


def _cell(median: dict[str, Any], key: str, digits: int = 1) -> str:
    return " / ".join(
        "-" if median[f"{name} {key}"] is None else f"{median[f'{name} {key}']:.{digits}f}"
        for name in JOBS
    )


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
        share = median["checked verify_s"] / median["checked job_s"]
        activations = _median(job.get("activations_mb") for job in checked)
        rows.append(
            [
                f"{workload} ({HOW[workload]})",
                str(len(checked)),
                "; ".join(
                    f"{job['verified_calls']} graphs, {job['verify_s']:.2f} s "
                    f"(+{job['verify_compile_s']:.1f} s compiling)"
                    for job in checked
                ),
                f"{100 * share:.1f}%",
                _cell(median, "compile_s"),
                _cell(median, "first_step_s"),
                _cell(median, "job_s"),
                _cell(median, "peak_rss_mb", 0),
                "-" if activations is None else f"{activations:.0f}",
            ]
        )
    header = [
        "workload",
        "rounds",
        "checked job: graphs checked, the check's own seconds",
        "check's share of the job",
        "compile s, off / unchecked / checked",
        "first step s, off / unchecked / checked",
        "job s, off / unchecked / checked",
        "peak RSS MB, off / unchecked / checked",
        "one forward's activations MB",
    ]
    write_recorded(header, rows, args.source, args.json)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
