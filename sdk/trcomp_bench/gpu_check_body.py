"""The measurements of ``gpu_check``, each run in a child process (torch imported here).

``python -m trcomp_bench.gpu_check_body <part> [--dry-run]`` prints one
``MARK`` line of JSON. Parts: ``engines`` (one GPU, every engine of
:data:`ENGINES`), ``step-metric`` (a loop under trcomp's metrics hook, with a
synchronized reference), ``ddp`` (a torchrun worker: NCCL, DDP overlap, and FSDP2 sharded
block by block, eager and with each block compiled as trcomp's zero-code path does).

An engine is a function ``(model, optimizer, batch) -> step`` where ``step()``
runs one training step and returns the loss; add a backend by adding one.
``--dry-run`` runs the same code on CPU with a tiny model (gloo instead of NCCL).
"""

from __future__ import annotations

import argparse
import itertools
import json
import os
import statistics
import sys
import time
from collections.abc import Callable
from typing import Any, cast

import torch
from torch import nn

from trcomp_bench.runs import MARK

__all__ = ["ENGINES", "Engine", "main", "make_model"]

Engine = Callable[[nn.Module, torch.optim.Optimizer, tuple[torch.Tensor, torch.Tensor]], Any]


def make_model(dry_run: bool) -> nn.Module:
    """A deep MLP with LayerNorm: ~67M parameters on GPU (2 x 8 layers of 2048), tiny on CPU."""
    width, depth = (64, 2) if dry_run else (2048, 8)
    layers: list[nn.Module] = []
    for _ in range(depth):
        layers += [nn.Linear(width, width * 2), nn.GELU(), nn.Linear(width * 2, width)]
        layers.append(nn.LayerNorm(width))
    return nn.Sequential(*layers)


def _batch(dry_run: bool, device: torch.device) -> tuple[torch.Tensor, torch.Tensor]:
    rows, width = (16, 64) if dry_run else (8192, 2048)
    generator = torch.Generator().manual_seed(0)
    x = torch.randn(rows, width, generator=generator).to(device)
    return x, torch.randn(rows, width, generator=generator).to(device)


def _stepper(model: nn.Module, optimizer: torch.optim.Optimizer, batch: Any) -> Any:
    x, y = batch

    def step() -> torch.Tensor:
        loss = nn.functional.mse_loss(model(x), y)
        loss.backward()
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
        return loss.detach()

    return step


def _compiled(config: dict[str, Any]) -> Engine:
    def engine(model: nn.Module, optimizer: torch.optim.Optimizer, batch: Any) -> Any:
        from trcomp.runtime import compile_kwargs

        compiled = cast(nn.Module, torch.compile(model, **compile_kwargs(config)))
        return _stepper(compiled, optimizer, batch)

    return engine


ENGINES: dict[str, Engine] = {
    "eager": _stepper,
    "inductor": _compiled({"mode": "default"}),
    # mode and inductor_options together: runtime.compile must keep the CUDA graphs.
    "inductor-reduce-overhead": _compiled(
        {"mode": "reduce-overhead", "inductor_options": {"epilogue_fusion": True}}
    ),
}
DRY_RUN_ENGINES = ("eager", "inductor")


def _sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def _timed(step: Any, device: torch.device, warmup: int, steps: int) -> dict[str, Any]:
    """First step (compile), then a synchronized median step time and the losses."""
    start = time.perf_counter()
    losses = [float(step())]
    _sync(device)
    first = time.perf_counter() - start
    for _ in range(warmup):
        losses.append(float(step()))
    times = []
    for _ in range(steps):
        _sync(device)
        t0 = time.perf_counter()
        loss = step()
        _sync(device)
        times.append(time.perf_counter() - t0)
        losses.append(float(loss))
    return {"first_step_s": first, "step_s": statistics.median(times), "losses": losses}


def _device(dry_run: bool) -> torch.device:
    if dry_run:
        return torch.device("cpu")
    from trcomp.runtime import device

    return device()


def part_engines(args: argparse.Namespace) -> dict[str, Any]:
    """One GPU: each engine's first step, steady step and losses (same seed, same data)."""
    device = _device(args.dry_run)
    names = args.engines.split(",") if args.engines else list(ENGINES)
    if args.dry_run:
        names = [n for n in names if n in DRY_RUN_ENGINES]
    results: dict[str, Any] = {}
    for name in names:
        torch.manual_seed(0)
        model = make_model(args.dry_run).to(device)
        optimizer = torch.optim.SGD(model.parameters(), lr=1e-3)
        step = ENGINES[name](model, optimizer, _batch(args.dry_run, device))
        try:
            results[name] = _timed(step, device, args.warmup, args.steps)
        except Exception as exc:  # one engine failing must not hide the others
            results[name] = {"error": f"{type(exc).__name__}: {str(exc)[:800]}"}
        print(f"[gpu_check] engine {name}: {results[name].get('step_s')}", file=sys.stderr)
    eager = results.get("eager", {}).get("losses")
    for result in results.values():
        losses = result.pop("losses", None)
        if losses:
            result["final_loss"] = losses[-1]
        if eager and losses:
            diffs = [abs(a - b) for a, b in zip(losses, eager, strict=False)]
            result["max_loss_diff_vs_eager"] = max(diffs)
    return {"device": str(device), "engines": results}


def part_step_metric(args: argparse.Namespace) -> dict[str, Any]:
    """Train under the metrics hook (the parent sets it up) and measure the truth alongside.

    The reference is wall time over all timed steps with one synchronization at
    each end: what the steps really took on the device.
    """
    device = _device(args.dry_run)
    torch.manual_seed(0)
    model = make_model(args.dry_run).to(device)
    optimizer = torch.optim.SGD(model.parameters(), lr=1e-3)
    # CUDA graphs: the CPU queues whole steps at once, the case a CPU clock gets wrong.
    engine = _stepper if args.dry_run else _compiled({"mode": "reduce-overhead"})
    step = engine(model, optimizer, _batch(args.dry_run, device))
    for _ in range(args.warmup + 1):
        step()
    _sync(device)
    start = time.perf_counter()
    cpu_marks = [start]
    for _ in range(args.steps):
        step()
        cpu_marks.append(time.perf_counter())  # what an unsynchronized clock would see
    _sync(device)
    total = time.perf_counter() - start
    cpu = [b - a for a, b in itertools.pairwise(cpu_marks)]
    return {
        "device": str(device),
        "steps_timed": args.steps,
        "reference_step_s": total / args.steps,
        "unsynchronized_cpu_step_s": statistics.median(cpu),
        "hook_steps_expected": args.warmup + 1 + args.steps,
    }


def part_ddp(args: argparse.Namespace) -> dict[str, Any] | None:
    """A torchrun worker: NCCL, set_device, and whether DDP overlaps its all-reduce."""
    import torch.distributed as dist
    from torch.nn.parallel import DistributedDataParallel as DDP

    dist.init_process_group("gloo" if args.dry_run else "nccl")
    rank, local_rank = dist.get_rank(), int(os.environ["LOCAL_RANK"])
    device = _device(args.dry_run)
    facts: dict[str, Any] = {"world_size": dist.get_world_size(), "device": str(device)}
    if device.type == "cuda":
        facts["current_device_is_local_rank"] = torch.cuda.current_device() == local_rank
    batch = _batch(args.dry_run, device)

    def fresh() -> tuple[nn.Module, torch.optim.Optimizer]:
        torch.manual_seed(0)
        model = make_model(args.dry_run).to(device)
        return model, torch.optim.SGD(model.parameters(), lr=1e-3)

    timings: dict[str, Any] = {}
    model, optimizer = fresh()
    timings["compute_only"] = _timed(_stepper(model, optimizer, batch), device, 2, args.steps)
    grads = torch.zeros(sum(p.numel() for p in model.parameters()), device=device)

    def all_reduce() -> torch.Tensor:
        dist.all_reduce(grads)
        return grads[:1]

    timings["all_reduce_only"] = _timed(all_reduce, device, 2, args.steps)
    variants: dict[str, Callable[[nn.Module], nn.Module]] = {
        "ddp_eager": lambda m: DDP(m),
        "ddp_of_compiled": lambda m: DDP(cast(nn.Module, torch.compile(m))),  # docs/runtime.md
        "compiled_ddp": lambda m: cast(nn.Module, torch.compile(DDP(m))),
        "fsdp2_eager": lambda m: sharded_blocks(m, compiled=False),
        "fsdp2_blocks_compiled": lambda m: sharded_blocks(m, compiled=True),
    }
    if args.dry_run:
        variants = {name: variants[name] for name in ("ddp_eager", *FSDP2_VARIANTS)}
    for name, wrap in variants.items():
        model, _ = fresh()
        try:
            wrapped = wrap(model)
            # After wrapping: FSDP2 replaces the parameters with their shards.
            optimizer = torch.optim.SGD(wrapped.parameters(), lr=1e-3)
            timings[name] = _timed(_stepper(wrapped, optimizer, batch), device, 2, args.steps)
        except Exception as exc:  # one variant failing is a result of the check, not its end
            timings[name] = {"error": f"{type(exc).__name__}: {str(exc)[:800]}"}
    compute = timings["compute_only"]["step_s"]
    comm = timings["all_reduce_only"]["step_s"]
    eager, compiled = (timings.get(name, {}).get("losses") for name in FSDP2_VARIANTS)
    if eager and compiled:
        diff = max(abs(a - b) for a, b in zip(eager, compiled, strict=True))
        timings["fsdp2_blocks_compiled"]["max_loss_diff_vs_fsdp2_eager"] = diff
    for name in variants:
        step_s = timings[name].get("step_s")
        if step_s is not None and name not in FSDP2_VARIANTS:
            # 1.0: the all-reduce hides entirely behind backward; 0: none of it does.
            timings[name]["overlap"] = (compute + comm - step_s) / comm if comm > 0 else None
        timings[name].pop("losses", None)
    for name in ("compute_only", "all_reduce_only"):
        timings[name].pop("losses", None)
    dist.destroy_process_group()
    return {**facts, **timings} if rank == 0 else None


FSDP2_VARIANTS = ("fsdp2_eager", "fsdp2_blocks_compiled")
"""The ddp part's FSDP2 variants: sharded block by block, eager and compiled as trcomp does."""


def sharded_blocks(model: nn.Module, *, compiled: bool) -> nn.Module:
    """``make_model``'s layers as blocks of four (Linear, GELU, Linear, LayerNorm), each
    sharded with FSDP2, then the root; ``compiled``: each block's forward compiled inside
    FSDP's hooks, one traced function for all (trcomp's zero-code path for FSDP2)."""
    import functools

    from torch.distributed.fsdp import fully_shard

    layers = list(model.children())
    root = nn.Sequential(*(nn.Sequential(*layers[i : i + 4]) for i in range(0, len(layers), 4)))
    for block in root:
        fully_shard(block)
    fully_shard(root)
    if compiled:
        from trcomp_container.inprocess.fsdp import shared_forward

        cls = type(root[0])
        forward = shared_forward(torch, cls, "gpu_check_fsdp2_block", lambda _: None, {})
        for block in root:
            block.forward = functools.partial(forward, block)
    return root


def part_plain_loop(args: argparse.Namespace) -> dict[str, Any]:
    """A plain loop, no torch.compile: the start-up hook (set up by the parent) compiles it.

    Long enough for the job's own eager-against-compiled measurement (15 steps).
    """
    device = _device(args.dry_run)
    torch.manual_seed(0)
    model = make_model(args.dry_run).to(device)
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-4)
    step = _stepper(model, optimizer, _batch(args.dry_run, device))
    losses = [float(step()) for _ in range(max(args.steps, 24))]
    return {"device": str(device), "steps": len(losses), "final_loss": losses[-1]}


PARTS = {
    "engines": part_engines,
    "step-metric": part_step_metric,
    "ddp": part_ddp,
    "plain-loop": part_plain_loop,
}


def main(argv: list[str] | None = None) -> int:
    """Run one part and print its result line."""
    parser = argparse.ArgumentParser(prog="python -m trcomp_bench.gpu_check_body")
    parser.add_argument("part", choices=sorted(PARTS))
    parser.add_argument("--dry-run", action="store_true")
    parser.add_argument("--engines", default="")
    parser.add_argument("--steps", type=int, default=20)
    parser.add_argument("--warmup", type=int, default=3)
    args = parser.parse_args(argv)
    if not args.dry_run:
        torch.backends.cuda.matmul.allow_tf32 = True
    result = PARTS[args.part](args)
    if result is not None:
        print(MARK + json.dumps(result, default=str), flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
