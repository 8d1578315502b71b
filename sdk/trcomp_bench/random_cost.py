"""What keeping eager's random numbers costs: inductor with and without ``fallback_random``.

trcomp's compiled code draws the same random numbers as eager by default
(``torch._inductor.config.fallback_random``: dropout calls torch's generator),
so a job keeps a compiler-off job's dropout masks and data order;
``fast_random=True`` lets inductor generate them in its kernels. Three copies of
one model with dropout take turns step by step in one process (the order
alternating, so a shared machine's load lands on all alike): ``eager``,
``eager random`` (compiled, fallback_random) and ``own random`` (compiled,
inductor's generator). Prints, and with ``--json`` writes, a ``recorded``
table (see :mod:`trcomp_bench.doctables`)::

    python -m trcomp_bench.random_cost --steps 60 --json out.json
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

_ROWS = ("eager", "eager random", "own random")


def _model(width: int, dropout: float) -> Any:
    from torch import nn

    layers: list[Any] = [nn.Linear(64, width)]
    for _ in range(3):
        layers += [nn.GELU(), nn.Dropout(dropout), nn.Linear(width, width)]
    layers += [nn.GELU(), nn.Dropout(dropout), nn.Linear(width, 10)]
    return nn.Sequential(*layers)


def measure(
    *,
    width: int = 512,
    batch_size: int = 64,
    dropout: float = 0.1,
    steps: int = 60,
    warmup: int = 3,
    backend: str = "inductor",
) -> dict[str, Any]:
    """Median step seconds of the three copies after ``warmup`` steps each (which compile)."""
    import torch

    inductor = torch._inductor.config
    torch.manual_seed(0)
    base = _model(width, dropout)
    models = {name: _model(width, dropout) for name in _ROWS}
    for model in models.values():
        model.load_state_dict(base.state_dict())
    fallback = {"eager random": True, "own random": False}
    for name in fallback:
        models[name].compile(backend=backend)
    optimizers = {name: torch.optim.AdamW(m.parameters(), lr=1e-3) for name, m in models.items()}
    batches = [(torch.randn(batch_size, 64), torch.randint(0, 10, (batch_size,))) for _ in range(4)]

    def step(name: str, number: int) -> float:
        x, y = batches[number % len(batches)]
        start = time.perf_counter()
        # The setting is read when the graph compiles (the first warm-up step) and is part
        # of the compiled graph's cache key: each copy keeps the code it compiled with.
        with inductor.patch(fallback_random=fallback.get(name, False)):
            loss = torch.nn.functional.cross_entropy(models[name](x), y)
        loss.backward()
        optimizers[name].step()
        optimizers[name].zero_grad()
        return time.perf_counter() - start

    for number in range(max(warmup, 1)):
        for name in _ROWS:
            step(name, number)
    times: dict[str, list[float]] = {name: [] for name in _ROWS}
    for number in range(steps):
        order = list(_ROWS) if number % 2 else list(reversed(_ROWS))
        for name in order:
            times[name].append(step(name, number))
    return {name: statistics.median(values) for name, values in times.items()}


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of ``python -m trcomp_bench.random_cost``."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--width", type=int, default=512)
    parser.add_argument("--batch-size", type=int, default=64)
    parser.add_argument("--dropout", type=float, default=0.1)
    parser.add_argument("--steps", type=int, default=60)
    parser.add_argument("--warmup", type=int, default=3)
    parser.add_argument("--json", type=Path)
    parser.add_argument("--source", default="", help="how and where it ran, for the table")
    args = parser.parse_args(None if argv is None else list(argv))
    got = measure(
        width=args.width,
        batch_size=args.batch_size,
        dropout=args.dropout,
        steps=args.steps,
        warmup=args.warmup,
    )
    row = [
        f"MLP {args.width} wide, 4 dropout layers (p={args.dropout}), batch {args.batch_size}",
        str(args.steps),
        *(f"{got[name] * 1e3:.2f}" for name in _ROWS),
        f"{got['eager random'] / got['own random']:.3f}",
        f"{got['eager'] / got['eager random']:.3f}",
    ]
    header = [
        "workload",
        "steps each",
        "eager step (ms)",
        "compiled, eager's random numbers (ms)",
        "compiled, inductor's own (ms)",
        "eager's numbers / own",
        "speed-up over eager, eager's numbers",
    ]
    write_recorded(header, [row], args.source, args.json)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
