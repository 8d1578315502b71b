"""Distributed rows: DDP and FSDP2 on two ranks as real jobs, compiler off against the default.

Each wrap (``ddp``: ``DistributedDataParallel``; ``fsdp2``: ``fully_shard`` on
each block, then the root) of a reference workload runs as a process-mode job
(``trcomp.PyTorch``, ``instance_type="local_process"``,
``distribution={"torch_distributed": ...}``, two gloo ranks on this host), the
script a plain loop with no trcomp import. Per round, side by side: the
compiler off; the default config cold with the ranks compiling at once
(``TRCOMP_COMPILE_TURNS=0``, as before compile turns); the default config cold
with turns; and the default config warm (the turns job's compile cache). From
each job's summary: the steady step (slowest rank), every rank's compile
seconds and first step, the first-step skew, and every rank's inductor cache
hits. Prints, and with ``--json`` writes, a ``recorded`` table
(:mod:`trcomp_bench.doctables`)::

    python -m trcomp_bench.distributed --rounds 2 --json out.json

The GPU script (``make gpu-check``) has the NCCL counterpart.
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from trcomp.contract.env import COMPILE_TURNS_ENV, NPROC_PER_NODE_ENV
from trcomp_bench.results import write_recorded
from trcomp_bench.rounds import ratio_and_spread
from trcomp_bench.speedup_jobs import run_job

__all__ = ["DIST_SCRIPT", "KINDS", "figures", "main", "measure"]

DIST_SCRIPT = '''"""A plain PyTorch loop over a reference workload, on every rank: DDP or FSDP2."""
import argparse
import torch
import torch.distributed as dist
from torch import nn
from trcomp_bench.workloads import get_workload, loss_of

parser = argparse.ArgumentParser()
parser.add_argument("--workload", default="gpt2")
parser.add_argument("--steps", type=int, default=30)
parser.add_argument("--wrap", default="ddp")
args = parser.parse_args()
dist.init_process_group("gloo")
torch.manual_seed(0)
workload = get_workload(args.workload)
model, batch = workload.factory("small")(workload.default_batch_size)
if hasattr(model, "config"):  # transformers: no KV cache in training (none is read back)
    model.config.use_cache = False
if args.wrap == "fsdp2":
    from torch.distributed.fsdp import fully_shard

    blocks = max((m for m in model.modules() if isinstance(m, nn.ModuleList)), key=len)
    for block in blocks:
        fully_shard(block)
    fully_shard(model)
else:
    model = nn.parallel.DistributedDataParallel(model)
model.train()
optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)
for step in range(args.steps):
    inputs = batch(step * dist.get_world_size() + dist.get_rank())
    output = model(**inputs) if isinstance(inputs, dict) else model(*inputs)
    loss_of(output).backward()
    optimizer.step()
    optimizer.zero_grad(set_to_none=True)
dist.destroy_process_group()
'''
KINDS = ("off", "cold, ranks at once", "cold, turns", "warm")
"""The jobs of a round, in the order they run."""


def figures(summary: dict[str, Any]) -> dict[str, Any]:
    """What a row needs from one job's summary.json."""
    ranks = summary["ranks"]
    return {
        "step_s": summary["metrics"].get("step_time_s"),
        "compile_s": [rank.get("compile_time_s") or 0.0 for rank in ranks],
        "first_step_s": [rank.get("first_step_s") for rank in ranks],
        "skew_s": summary.get("first_step_skew_s"),
        "cache_hits": [(rank.get("compile_cache") or {}).get("fxgraph_hit", 0) for rank in ranks],
        "cache_misses": [
            (rank.get("compile_cache") or {}).get("fxgraph_miss", 0) for rank in ranks
        ],
        "compiled": summary.get("compiled"),
    }


def measure(
    wrap: str, *, workload: str = "gpt2", steps: int = 20, rounds: int = 1
) -> dict[str, list[dict[str, Any]]]:
    """Each kind of job's figures, one per round."""
    from trcomp import TrainingCompilerConfig

    jobs: dict[str, list[dict[str, Any]]] = {kind: [] for kind in KINDS}
    hyperparameters = {"workload": workload, "steps": steps, "wrap": wrap}
    with tempfile.TemporaryDirectory(prefix="trcomp-distributed-") as tmp:
        for number in range(rounds):
            warm_cache = Path(tmp) / f"{number}-turns-checkpoints"
            for kind in KINDS:
                environment = {NPROC_PER_NODE_ENV: "2"}
                if kind == "cold, ranks at once":
                    environment[COMPILE_TURNS_ENV] = "0"
                summary = run_job(
                    Path(tmp) / f"{wrap}-{number}-{KINDS.index(kind)}",
                    DIST_SCRIPT,
                    hyperparameters,
                    TrainingCompilerConfig(enabled=kind != "off"),
                    distribution={"torch_distributed": {"enabled": True}},
                    environment=environment,
                    checkpoints=warm_cache if kind in ("cold, turns", "warm") else None,
                )
                jobs[kind].append(figures(summary))
                print(f"[distributed] {wrap} {kind}: {jobs[kind][-1]}", flush=True)
    return jobs


def rows(wrap: str, jobs: dict[str, list[dict[str, Any]]]) -> list[list[str]]:
    """One row per kind of compiled job: its step against the compiler-off job of its round."""
    off = jobs["off"]
    out = []
    for kind in KINDS[1:]:
        runs = jobs[kind]
        ratios = [o["step_s"] / r["step_s"] for o, r in zip(off, runs, strict=True)]
        median, low, high = ratio_and_spread(ratios)
        out.append(
            [
                f"{wrap}, {kind}",
                f"{median:.2f}x ({low:.2f}-{high:.2f})",
                _per_rank(runs, "first_step_s", "{:.1f}"),
                f"{statistics.median(sum(r['compile_s']) for r in runs):.1f}",
                _per_rank(runs, "compile_s", "{:.1f}"),
                f"{statistics.median(r['skew_s'] or 0.0 for r in runs):.2f}",
                "; ".join(_hits(run) for run in runs),
            ]
        )
    return out


def _hits(run: dict[str, Any]) -> str:
    pairs = zip(run["cache_hits"], run["cache_misses"], strict=True)
    return "/".join(f"{hits} of {hits + misses}" for hits, misses in pairs)


def _per_rank(runs: list[dict[str, Any]], key: str, spec: str) -> str:
    """Rank by rank (``/``), round by round (``;``)."""
    return "; ".join(
        "/".join("n/a" if v is None else spec.format(v) for v in run[key]) for run in runs
    )


HEADER = [
    "job (2 gloo ranks)",
    "off step / this step",
    "first step s, rank 0/1",
    "compile s, summed over ranks",
    "compile s, rank 0/1",
    "first-step skew s",
    "inductor graphs from the cache, rank 0/1",
]


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of ``python -m trcomp_bench.distributed``."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--wraps", nargs="+", default=["ddp", "fsdp2"], choices=["ddp", "fsdp2"])
    parser.add_argument("--workload", default="gpt2")
    parser.add_argument("--steps", type=int, default=20)
    parser.add_argument("--rounds", type=int, default=1)
    parser.add_argument("--json", type=Path)
    parser.add_argument("--source", default="", help="how and where it ran, for the table")
    args = parser.parse_args(None if argv is None else list(argv))
    table: list[list[str]] = []
    for wrap in args.wraps:
        jobs = measure(wrap, workload=args.workload, steps=args.steps, rounds=args.rounds)
        table += rows(wrap, jobs)
    write_recorded(HEADER, table, args.source, args.json)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
