"""The reference workloads as real jobs with ``backend="auto"``: the job's own speed-up.

``python -m trcomp_bench.speedup_jobs --json F --markdown F`` runs each workload
as an unmodified plain PyTorch loop (no trcomp import, no torch.compile) through
``trcomp.PyTorch(instance_type="local_process", compiler_config=
TrainingCompilerConfig(backend="auto"))``, and reads what the job measured of
itself: ``speedup_vs_eager``, which of eager and compiled it kept, and what the
measurement cost. Beside it, the benchmark's own inductor/eager ratio for the
workload from a bench JSON (``--bench``), when given.
"""

from __future__ import annotations

import argparse
import json
import tarfile
import tempfile
from pathlib import Path
from typing import Any

from trcomp_bench.results import table
from trcomp_bench.rounds import ratio_and_spread

__all__ = ["JOB_SCRIPT", "main", "markdown_table", "run_job", "run_workload"]

JOB_SCRIPT = '''"""A plain PyTorch loop over one of trcomp_bench's reference workloads."""
import argparse
import torch
from trcomp_bench.workloads import get_workload, loss_of

parser = argparse.ArgumentParser()
parser.add_argument("--workload", default="mlp")
parser.add_argument("--steps", type=int, default=30)
args = parser.parse_args()
torch.manual_seed(0)
workload = get_workload(args.workload)
model, batch = workload.factory("small")(workload.default_batch_size)
model.train()
optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)
for step in range(args.steps):
    inputs = batch(step)
    output = model(**inputs) if isinstance(inputs, dict) else model(*inputs)
    loss_of(output).backward()
    optimizer.step()
    optimizer.zero_grad(set_to_none=True)
'''
WORKLOADS = ("gpt2", "bert", "mlp", "cnn")


def run_workload(name: str, work: Path, steps: int) -> dict[str, Any]:
    """Run ``name`` as a process-mode job; return the row its summary gives."""
    from trcomp import TrainingCompilerConfig

    summary = run_job(
        work, JOB_SCRIPT, {"workload": name, "steps": steps}, TrainingCompilerConfig(backend="auto")
    )
    speedup = summary.get("speedup") or {}
    return {
        "workload": name,
        "steps": steps,
        "compiled": summary.get("compiled"),
        "speedup_vs_eager": speedup.get("speedup_vs_eager"),
        "kept": speedup.get("kept"),
        "eager_step_s": speedup.get("eager_step_s"),
        "compiled_step_s": speedup.get("compiled_step_s"),
        "cost_s": speedup.get("cost_s"),
        "cost_share": speedup.get("cost_share"),
        "job_s": summary.get("duration_s"),
        "reason": speedup.get("reason"),
    }


def run_job(
    work: Path,
    script: str,
    hyperparameters: dict[str, Any],
    config: Any,
    *,
    checkpoints: Path | None = None,
    **estimator: Any,
) -> Any:
    """Run ``script`` as a process-mode job under ``config`` in ``work``; its summary.json.

    ``checkpoints``: the job's checkpoint location (its compile cache), default its own
    under ``work``; ``estimator``: more arguments of ``trcomp.PyTorch`` (``distribution``,
    ``environment``).
    """
    from trcomp import PyTorch

    source = work / "src"
    source.mkdir(parents=True, exist_ok=True)
    (source / "train.py").write_text(script)
    estimator = PyTorch(
        entry_point="train.py",
        source_dir=str(source),
        role="arn:aws:iam::111122223333:role/unused-locally",
        instance_type="local_process",
        instance_count=1,
        hyperparameters=hyperparameters,
        output_path=f"file://{work / 'output'}",
        checkpoint_s3_uri=f"file://{checkpoints or work / 'checkpoints'}",
        compiler_config=config,
        **estimator,
    )
    estimator.fit()
    output_tar = Path(str(estimator.model_data).removeprefix("file://")).with_name("output.tar.gz")
    with tarfile.open(output_tar) as tar:
        member = next(m for m in tar.getmembers() if m.name.endswith("compiler/summary.json"))
        extracted = tar.extractfile(member)
        assert extracted is not None
        return json.load(extracted)


def bench_ratio(bench: list[dict[str, Any]], workload: str) -> float | None:
    """The bench's inductor speed-up over eager for ``workload``, as its table gives it.

    The median of the rounds' ratios where the bench kept them, else eager's
    step time over inductor's.
    """
    rows = {row["backend"]: row for row in bench if row["workload"] == workload}
    inductor = rows.get("inductor") or {}
    if inductor.get("vs_eager_rounds"):
        return ratio_and_spread(inductor["vs_eager_rounds"])[0]
    eager, step = (rows.get("eager") or {}).get("step_s"), inductor.get("step_s")
    return eager / step if eager and step else None


def markdown_table(rows: list[dict[str, Any]]) -> str:
    """The rows as a markdown table (results.table, like every bench table)."""

    def fmt(value: Any, spec: str) -> str:
        return "n/a" if value is None else format(value, spec)

    header = [
        "workload",
        "job's speed-up",
        "bench's inductor/eager",
        "kept",
        "eager step s",
        "compiled step s",
        "cost s",
        "cost share",
    ]
    body = [
        [
            row["workload"],
            fmt(row["speedup_vs_eager"], ".2f") + ("x" if row["speedup_vs_eager"] else ""),
            fmt(row.get("bench_ratio"), ".2f") + ("x" if row.get("bench_ratio") else ""),
            row["kept"] or "n/a",
            fmt(row["eager_step_s"], ".4f"),
            fmt(row["compiled_step_s"], ".4f"),
            fmt(row["cost_s"], ".3f"),
            fmt(row["cost_share"], ".2%"),
        ]
        for row in rows
    ]
    return table(header, body)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--workloads", nargs="+", default=list(WORKLOADS), choices=WORKLOADS)
    parser.add_argument("--steps", type=int, default=30)
    parser.add_argument("--bench", type=Path, help="a bench JSON with eager and inductor rows")
    parser.add_argument("--json", type=Path, required=True)
    parser.add_argument("--markdown", type=Path)
    args = parser.parse_args(argv)
    bench = json.loads(args.bench.read_text()) if args.bench else []
    rows = []
    with tempfile.TemporaryDirectory(prefix="trcomp-speedup-jobs-") as tmp:
        for name in args.workloads:
            print(f"[speedup-jobs] {name}: running the job ...", flush=True)
            row = run_workload(name, Path(tmp) / name, args.steps)
            row["bench_ratio"] = bench_ratio(bench, name)
            rows.append(row)
            print(f"[speedup-jobs] {name}: {json.dumps(row)}", flush=True)
            args.json.parent.mkdir(parents=True, exist_ok=True)
            args.json.write_text(json.dumps(rows, indent=1) + "\n")
    if args.markdown:
        args.markdown.write_text(markdown_table(rows))
    print(markdown_table(rows))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
