"""Steady step of regional against whole-model compile, interleaved in one process.

Separate processes (the benchmark's rows) see a shared machine's load at different
moments; here two copies of one model, one compiled block by block
(:func:`trcomp.contract.regions.compile_regions`) and one whole
(``Module.compile``), both with inductor, take turns step by step (the order
alternating), so load lands on both alike. Prints, and with ``--json`` writes,
a ``recorded`` table (see :mod:`trcomp_bench.doctables`)::

    python -m trcomp_bench.regional_steady --workload gpt2-8l --steps 60 --json out.json
"""

from __future__ import annotations

import argparse
import datetime
import json
import statistics
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

__all__ = ["main", "measure"]


def measure(workload: str, size: str, batch_size: int, steps: int) -> dict[str, Any]:
    """Median step times (s) of both copies after 3 warm-up steps each, and the graphs."""
    import torch
    from torch._dynamo.utils import counters

    from trcomp.contract import regions
    from trcomp_bench.workloads import get_workload, loss_of

    factory = get_workload(workload).factory(size)
    torch.manual_seed(0)
    regional, batch = factory(batch_size)
    whole, _ = factory(batch_size)
    whole.load_state_dict(regional.state_dict())
    groups = regions.compile_regions(regional, torch, {"backend": "inductor"})
    whole.compile(backend="inductor")
    runs = {
        "regional": (regional, torch.optim.AdamW(regional.parameters(), lr=1e-3, foreach=False)),
        "whole": (whole, torch.optim.AdamW(whole.parameters(), lr=1e-3, foreach=False)),
    }

    def step(name: str, number: int) -> float:
        model, optimizer = runs[name]
        data = batch(number)
        start = time.perf_counter()
        out = model(**data) if isinstance(data, dict) else model(*data)
        loss_of(out).backward()
        optimizer.step()
        optimizer.zero_grad()
        return time.perf_counter() - start

    for number in range(3):
        for name in runs:
            step(name, number)
    times: dict[str, list[float]] = {name: [] for name in runs}
    for number in range(3, 3 + steps):
        order = list(runs) if number % 2 else list(reversed(runs))
        for name in order:
            times[name].append(step(name, number))
    return {
        "regional_s": statistics.median(times["regional"]),
        "whole_s": statistics.median(times["whole"]),
        "blocks": ", ".join(group.describe() for group in groups),
        "graphs": int(counters["stats"]["unique_graphs"]),
    }


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of ``python -m trcomp_bench.regional_steady``."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--workload", default="gpt2-8l")
    parser.add_argument("--size", default="small", choices=("tiny", "small"))
    parser.add_argument("--batch-size", type=int, default=8)
    parser.add_argument("--steps", type=int, default=60)
    parser.add_argument("--json", type=Path)
    parser.add_argument("--source", default="", help="how and where it ran, for the table")
    args = parser.parse_args(None if argv is None else list(argv))
    got = measure(args.workload, args.size, args.batch_size, args.steps)
    ratio = got["regional_s"] / got["whole_s"]
    row = [
        args.workload, got["blocks"], str(args.steps), f"{got['regional_s'] * 1e3:.1f}",
        f"{got['whole_s'] * 1e3:.1f}", f"{ratio:.3f}",
    ]  # fmt: skip
    data = {
        "measured": datetime.date.today().isoformat(),
        "source": args.source,
        "header": [
            "workload",
            "regional blocks",
            "steps each",
            "regional step (ms)",
            "whole-model step (ms)",
            "regional / whole",
        ],
        "rows": [row],
    }
    print(json.dumps(data, indent=2))
    if args.json:
        args.json.write_text(json.dumps(data, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
