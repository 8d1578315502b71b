"""``trcomp bench``: the benchmark and the batch-size finder on the command line.

Mounted by the ``trcomp`` command through :func:`register`; also runs alone as
``python -m trcomp_bench``. Examples::

    trcomp bench --json out/bench.json --markdown out/bench.md --png out/bench.png
    trcomp bench --model mypkg.models:make --batch-size 16
    trcomp bench --find-batch-size --workloads gpt2 --memory-budget-mb 4000
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Sequence
from dataclasses import asdict
from pathlib import Path

from trcomp_bench.rounds import DEFAULT_SPREAD_BOUND

__all__ = ["build_parser", "main", "register", "run"]

_DESCRIPTION = (
    "Train reference workloads (or your own model) with eager PyTorch and each compiler, "
    "side by side, one fresh process per measurement, in rounds that interleave eager and "
    "each compiler (each round's ratio against eager, their spread, and a flag when the "
    "load changed or the rounds disagree): time to first step with a cold "
    "compile cache, a warm one (the cache dir the cold run filled) and a warm one from a "
    "shared compile cache (another, empty cache dir that only the shared cache the cold run "
    "wrote fills), steady step time, samples/s, peak memory, and the largest loss "
    "difference against eager (dropout off, fp32)."
)


def _csv(text: str) -> tuple[str, ...]:
    return tuple(part.strip() for part in text.split(",") if part.strip())


def _positive(text: str) -> int:
    value = int(text)
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be 1 or more, got {value}")
    return value


def _add_arguments(parser: argparse.ArgumentParser) -> None:
    what = parser.add_argument_group("what to run")
    what.add_argument(
        "--workloads",
        type=_csv,
        default=("gpt2", "bert", "mlp", "cnn"),
        help="comma-separated reference workloads (default: gpt2,bert,mlp,cnn)",
    )
    what.add_argument(
        "--backends",
        type=_csv,
        default=None,
        help="comma-separated: eager, inductor, inductor-max-autotune, inductor-regional, "
        "inductor-whole, xla, jax "
        "(default: eager,inductor and xla where torch-xla is installed)",
    )
    what.add_argument(
        "--model",
        metavar="MODULE:FACTORY",
        help="your own model instead of the workloads: factory(batch_size) returns "
        "(model, batch_fn); see docs/benchmarks.md",
    )
    what.add_argument(
        "--size",
        choices=("tiny", "small"),
        default="small",
        help="reference model size (default: small; tiny is for smoke tests)",
    )
    what.add_argument("--batch-size", type=int, help="batch size (default: per workload)")
    what.add_argument(
        "--device",
        choices=("auto", "cpu", "cuda"),
        default="auto",
        help="where eager and inductor run (default: auto, CUDA when present)",
    )
    how = parser.add_argument_group("how long")
    how.add_argument("--steps", type=int, default=30, help="steps per process (default: 30)")
    how.add_argument(
        "--warmup", type=int, default=5, help="steps left out of the steady step time (default: 5)"
    )
    rounds = how.add_mutually_exclusive_group()
    rounds.add_argument(
        "--rounds",
        type=_positive,
        help="rounds of eager and each compiler in turn, back to back, the order rotated "
        "each round: the cold round and ROUNDS-1 warm ones; each round gives its own ratio "
        "against eager (default: 3)",
    )
    rounds.add_argument(
        "--repeats",
        type=int,
        help="warm-cache rounds after the cold one: --rounds minus one (default: 2)",
    )
    how.add_argument(
        "--load-bound",
        type=float,
        help="flag the ratios of a row whose runs saw the 1-minute load average move by "
        "more than this (default: the number of CPU cores)",
    )
    how.add_argument(
        "--spread-bound",
        type=float,
        default=DEFAULT_SPREAD_BOUND,
        help="flag the ratios of a row whose rounds' ratios differ by more than this "
        "fraction, largest over smallest (default: %(default)s)",
    )
    how.add_argument(
        "--no-shared",
        action="store_true",
        help="skip the shared round (the first step of each compiled backend warm from a "
        "shared compile cache, in another, empty cache dir)",
    )
    how.add_argument("--lr", type=float, default=1e-3, help="AdamW learning rate (default: 1e-3)")
    how.add_argument(
        "--timeout-s",
        type=float,
        default=900.0,
        help="limit for one measurement process (default: 900)",
    )
    out = parser.add_argument_group("output (the markdown table always goes to stdout)")
    out.add_argument("--json", type=Path, metavar="PATH", help="write the rows as JSON")
    out.add_argument("--markdown", type=Path, metavar="PATH", help="write the markdown table")
    out.add_argument("--png", type=Path, metavar="PATH", help="write a chart (PNG)")
    out.add_argument("--no-progress", action="store_true", help="no progress bar on stderr")
    bs = parser.add_argument_group("batch-size finder")
    bs.add_argument(
        "--find-batch-size",
        action="store_true",
        help="find the largest batch that fits, per backend, for the first workload "
        "(or --model), and the learning rate to use with it",
    )
    bs.add_argument(
        "--memory-budget-mb",
        type=float,
        help="peak memory allowed (process RSS on CPU, where it is required; "
        "CUDA max allocated on GPU, where the default is the whole GPU)",
    )
    bs.add_argument(
        "--base-lr",
        type=float,
        default=1e-3,
        help="learning rate tuned at --base-batch-size (default: 1e-3)",
    )
    bs.add_argument(
        "--base-batch-size",
        type=int,
        default=8,
        help="batch size --base-lr was tuned at (default: 8)",
    )
    bs.add_argument(
        "--max-batch-size", type=int, default=1024, help="largest batch to try (default: 1024)"
    )


def register(subparsers: argparse._SubParsersAction) -> argparse.ArgumentParser:  # type: ignore[type-arg]
    """Add the ``bench`` command to a ``trcomp`` argparse parser.

    The command's handler is ``args.func(args) -> int``.
    """
    parser = subparsers.add_parser(
        "bench", help="benchmark eager against each compiler", description=_DESCRIPTION
    )
    _add_arguments(parser)
    parser.set_defaults(func=run)
    return parser


def build_parser() -> argparse.ArgumentParser:
    """The parser of ``python -m trcomp_bench`` (the same options as ``trcomp bench``)."""
    parser = argparse.ArgumentParser(prog="python -m trcomp_bench", description=_DESCRIPTION)
    _add_arguments(parser)
    return parser


def _find_batch_size(args: argparse.Namespace, backends: tuple[str, ...]) -> int:
    from trcomp_bench.batchsize import find_batch_size
    from trcomp_bench.results import table_head, table_row, write_text

    target = args.model or args.workloads[0]
    results = []
    print(f"largest batch that fits: {target}")
    print(
        table_head(("backend", "device", "largest batch", "peak mem (MiB)", "lr linear", "lr sqrt"))
    )
    for backend in backends:
        res = find_batch_size(
            backend, workload=args.workloads[0], model=args.model, size=args.size,
            memory_budget_mb=args.memory_budget_mb, base_lr=args.base_lr,
            base_batch_size=args.base_batch_size, limit=args.max_batch_size, device=args.device,
        )  # fmt: skip
        peak = max((t.peak_mem_mb or 0.0 for t in res.trials if t.fits), default=0.0)
        cells = (backend, res.device, res.batch_size, f"{peak:.0f}",
                 f"{res.lr_linear or 0:.3g}", f"{res.lr_sqrt or 0:.3g}")  # fmt: skip
        print(table_row(cells), flush=True)
        results.append(asdict(res))
    if args.json:
        write_text(args.json, json.dumps(results, indent=2) + "\n")
    return 0 if all(r["batch_size"] for r in results) else 1


def _repeats(args: argparse.Namespace) -> int:
    if args.rounds is not None:
        return int(args.rounds) - 1
    return 2 if args.repeats is None else int(args.repeats)


def run(args: argparse.Namespace) -> int:
    """Run ``trcomp bench`` for parsed ``args``; 1 when any measurement failed."""
    from trcomp_bench.harness import BenchOptions, default_backends, run_benchmark
    from trcomp_bench.results import markdown_table, plot, write_json, write_text

    backends = args.backends or default_backends()
    if args.find_batch_size:
        try:
            return _find_batch_size(args, backends)
        except (ValueError, RuntimeError) as exc:
            print(f"trcomp bench: {exc}", file=sys.stderr)
            return 2
    try:
        options = BenchOptions(
            workloads=args.workloads, backends=backends, size=args.size,
            batch_size=args.batch_size, steps=args.steps, warmup=args.warmup,
            repeats=_repeats(args), shared=not args.no_shared, device=args.device,
            model=args.model, lr=args.lr, timeout_s=args.timeout_s,
            load_bound=args.load_bound, spread_bound=args.spread_bound,
        )  # fmt: skip
        options.specs()  # check names before starting anything
    except ValueError as exc:
        print(f"trcomp bench: {exc}", file=sys.stderr)
        return 2
    result = run_benchmark(options, progress=not args.no_progress)
    table = markdown_table(result.rows)
    print(table, end="")
    for key, error in result.errors.items():
        print(f"trcomp bench: {key} failed: {error}", file=sys.stderr)
    for row in result.rows:
        if row.unreliable:
            print(f"trcomp bench: {row.workload}/{row.backend}: {row.unreliable}", file=sys.stderr)
    if args.json:
        write_json(result.rows, args.json)
    if args.markdown:
        write_text(args.markdown, table)
    if args.png and result.rows:
        plot(result.rows, args.png)
    return 1 if result.errors else 0


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of ``python -m trcomp_bench``; returns the exit code."""
    args = build_parser().parse_args(None if argv is None else list(argv))
    return run(args)
