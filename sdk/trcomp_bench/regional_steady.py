"""Steady step of regional against whole-model compile, interleaved in one process.

Separate processes (the benchmark's rows) see a shared machine's load at different
moments; here three copies of one model, all with inductor, take turns step by
step (the order alternating), so load lands on all alike: ``regional`` (its
repeated blocks marked as nested compile regions, then compiled in place:
:func:`trcomp.runtime.regions.compile_in_place`, what trcomp does), ``whole``
(``Module.compile``) and ``per-block`` (Accelerate's ``compile_regions``: each
block and each other leaf compiled on its own, what ``regional=True`` gives HF
Trainer jobs). Prints, and with ``--json`` writes, a ``recorded`` table (see
:mod:`trcomp_bench.doctables`)::

    python -m trcomp_bench.regional_steady --workload gpt2-8l --steps 60 --json out.json
"""

from __future__ import annotations

import argparse
import statistics
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from trcomp_bench.results import write_recorded

__all__ = ["main", "measure"]


def measure(
    workload: str,
    size: str,
    batch_size: int,
    steps: int,
    warmup: int = 3,
    backend: str = "inductor",
) -> dict[str, Any]:
    """Median step times (s) of the three copies after ``warmup`` steps each, and the blocks.

    The first warm-up step compiles; at least one is taken. ``backend``: torch.compile's
    (the tests use ``aot_eager``: the same regions, no code generation).
    """
    import torch
    from accelerate.utils import compile_regions

    from trcomp.runtime import regions
    from trcomp_bench.workloads import get_workload, loss_of

    factory = get_workload(workload).factory(size)
    torch.manual_seed(0)
    regional, batch = factory(batch_size)
    whole, _ = factory(batch_size)
    per_block, _ = factory(batch_size)
    whole.load_state_dict(regional.state_dict())
    per_block.load_state_dict(regional.state_dict())
    call = regions.compile_in_place(regional, torch, {"backend": backend}, regional=True)
    regional._compiled_call_impl = call
    whole.compile(backend=backend)
    models = {
        "regional": regional,
        "whole": whole,
        "per-block": compile_regions(per_block, backend=backend),
    }
    runs = {
        name: (model, torch.optim.AdamW(model.parameters(), lr=1e-3, foreach=False))
        for name, model in models.items()
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

    warmup = max(warmup, 1)
    for number in range(warmup):
        for name in runs:
            step(name, number)
    blocks = call.describe() or f"none ({call.unmarked})"
    times: dict[str, list[float]] = {name: [] for name in runs}
    for number in range(warmup, warmup + steps):
        order = list(runs) if number % 2 else list(reversed(runs))
        for name in order:
            times[name].append(step(name, number))
    return {f"{name}_s": statistics.median(times[name]) for name in runs} | {"blocks": blocks}


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of ``python -m trcomp_bench.regional_steady``."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--workload", default="gpt2-8l")
    parser.add_argument("--size", default="small", choices=("tiny", "small"))
    parser.add_argument("--batch-size", type=int, default=8)
    parser.add_argument("--steps", type=int, default=60)
    parser.add_argument(
        "--warmup", type=int, default=3, help="untimed steps each, compile included: %(default)s"
    )
    parser.add_argument("--json", type=Path)
    parser.add_argument("--source", default="", help="how and where it ran, for the table")
    args = parser.parse_args(None if argv is None else list(argv))
    got = measure(args.workload, args.size, args.batch_size, args.steps, args.warmup)
    whole = got["whole_s"]
    row = [
        args.workload, got["blocks"], str(args.steps), f"{got['regional_s'] * 1e3:.1f}",
        f"{whole * 1e3:.1f}", f"{got['per-block_s'] * 1e3:.1f}",
        f"{got['regional_s'] / whole:.3f}", f"{got['per-block_s'] / whole:.3f}",
    ]  # fmt: skip
    header = [
        "workload",
        "regional blocks",
        "steps each",
        "regional step (ms)",
        "whole-model step (ms)",
        "per-block step (ms)",
        "regional / whole",
        "per-block / whole",
    ]
    write_recorded(header, [row], args.source, args.json)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
