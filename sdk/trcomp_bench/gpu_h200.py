"""GPU benchmark for one H200, container-free: eager against inductor, max-autotune and jax.

Run it from a checkout on a machine with one NVIDIA H200, torch 2.9 and
transformers (no trcomp image, no downloads; the parent imports only the
standard-library modules ``trcomp_bench.runs`` and ``trcomp_bench.results``)::

    PYTHONPATH=sdk python -m trcomp_bench.gpu_h200 --out h200     # about 6-8 minutes
    PYTHONPATH=sdk python -m trcomp_bench.gpu_h200 --dry-run --out /tmp/h200  # CPU, tiny

It trains GPT-2 small (124M, seq 1024) and BERT-base (110M, masked LM, seq 512)
from their configs with random weights, bf16 autocast and fused AdamW, each
backend in its own process, and prints per model: tokens/s, the throughput
ratio over eager, time to first step (compilation) and the model FLOPs
utilisation, MFU = 6 * parameters * tokens per step / step time / peak, with
the peak :data:`PEAK_TFLOPS` (H200 SXM dense bf16, no sparsity). 6·N·tokens
ignores attention's own FLOPs, so MFU is slightly understated for long sequences.

``jax`` is the jax engine of ``backend="xla"`` (torchax on JAX with its CUDA
plugin, ``trcomp.runtime.compile_step`` around the unchanged step), run twice:
``jax`` with an empty JAX compilation cache (cold compile) and ``jax-warm``
with the cache the first run filled (warm compile). It needs jax, torchax and
the jax-cuda12 plugin from trcomp's ``container`` and ``jax-cuda`` extras, and
``PYTHONPATH=sdk`` for ``trcomp.runtime``. torchax has no autocast, so its
rows train bf16 weights while eager and inductor train fp32 weights under
bf16 autocast: the report marks the precision of every row.

Runs go backend by backend across the models (every model eager, then the jax
engine cold and warm, then inductor, then max-autotune, whose cold autotuning
is the slowest),
so one slow compile cannot keep the cheap numbers from being taken. Each run
has its own cap (``--run-cap-s``) inside the whole budget (``--budget-s``); a
run that does not fit is recorded as skipped. Each result is written at once
to ``<out>.json`` and ``<out>.md``, with the torch, triton, CUDA and driver
versions and the GPU's name.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import sys
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from trcomp_bench.results import table
from trcomp_bench.runs import (
    MARK,
    Job,
    ResultLog,
    add_job_arguments,
    collect_versions,
    marked_json,
    run_capped,
    run_jobs,
)
from trcomp_bench.versions import run_on_torch

__all__ = [
    "BACKENDS",
    "JAX_BACKENDS",
    "MODELS",
    "PEAK_TFLOPS",
    "GpuResult",
    "ModelSpec",
    "format_report",
    "jax_environment",
    "main",
    "mfu",
    "run_order",
    "train_flops_per_step",
]

PEAK_TFLOPS = 989.0  # H200 SXM, dense bf16 tensor cores (1979 is the 2:4-sparse figure)
# zero-code: the loop compiles nothing itself; the start-up hook compiles it and
# measures its own speed-up over eager (backend="auto"), as in a trcomp job.
BACKENDS = ("eager", "jax", "jax-warm", "inductor", "zero-code", "max-autotune")
JAX_BACKENDS = ("jax", "jax-warm")


@dataclass(frozen=True)
class ModelSpec:
    """A model from a transformers config: which, how big a batch, how long a sequence."""

    name: str
    kind: str  # "gpt2" or "bert"
    batch_size: int
    seq_len: int
    config: dict[str, Any]


MODELS = {
    "gpt2-small": ModelSpec("gpt2-small", "gpt2", 16, 1024, {}),
    "bert-base": ModelSpec("bert-base", "bert", 32, 512, {}),
}
# --dry-run: the same code path, small enough for a CPU test.
TINY = {
    "gpt2-small": ModelSpec("gpt2-small", "gpt2", 2, 32, dict(n_layer=2, n_embd=64, n_head=4, vocab_size=512, n_positions=32)),  # noqa: E501
    "bert-base": ModelSpec("bert-base", "bert", 2, 32, dict(num_hidden_layers=2, hidden_size=64, num_attention_heads=4, intermediate_size=128, vocab_size=512, max_position_embeddings=32)),  # noqa: E501
}  # fmt: skip


@dataclass(frozen=True)
class GpuResult:
    """One (model, backend) measurement."""

    model: str
    backend: str
    params: int
    tokens_per_step: int
    first_step_s: float
    step_s: float
    peak_mem_gb: float
    precision: str = "bf16 autocast"

    @property
    def tokens_per_s(self) -> float:
        """Training throughput in tokens per second."""
        return self.tokens_per_step / self.step_s


def train_flops_per_step(params: int, tokens: int) -> float:
    """Training FLOPs per step, 6 * N * tokens (forward 2, backward 4 per weight and token)."""
    return 6.0 * params * tokens


def mfu(params: int, tokens: int, step_s: float, peak_tflops: float = PEAK_TFLOPS) -> float:
    """Model FLOPs utilisation: achieved training FLOP/s over the device's peak."""
    return train_flops_per_step(params, tokens) / step_s / (peak_tflops * 1e12)


def _build(spec: ModelSpec) -> Any:
    from transformers import BertConfig, BertForMaskedLM, GPT2Config, GPT2LMHeadModel

    # Dropout off: the same model under every backend, and the compilers' RNG differs.
    if spec.kind == "gpt2":
        return GPT2LMHeadModel(
            GPT2Config(resid_pdrop=0.0, embd_pdrop=0.0, attn_pdrop=0.0, **spec.config)
        )
    config = BertConfig(hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0, **spec.config)
    return BertForMaskedLM(config)


def jax_environment(cache_dir: Path, dry_run: bool) -> dict[str, str]:
    """What a jax-engine run's process needs: the engine on, JAX's cache in ``cache_dir``.

    The same settings the container exports for a job (``TRCOMP_CONFIG``, a
    persistent cache that keeps every program, no GPU preallocation).
    """
    from trcomp.contract.runtime_config import RuntimeConfig

    return {
        **RuntimeConfig(enabled=True, backend="xla", engine="jax").to_env(),
        "JAX_PLATFORMS": "cpu" if dry_run else "cuda",
        "JAX_COMPILATION_CACHE_DIR": str(cache_dir.resolve()),
        "JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS": "0",
        "JAX_PERSISTENT_CACHE_MIN_ENTRY_SIZE_BYTES": "-1",
        "XLA_PYTHON_CLIENT_PREALLOCATE": "false",
        "USE_TORCH_XLA": "0",
    }


def _measure_jax(spec: ModelSpec, backend: str, steps: int, warmup: int) -> GpuResult:
    """The jax engine: bf16 weights, the step traced into one XLA program by compile_step."""
    import torch

    from trcomp import runtime

    if runtime.engine() != "jax":
        raise RuntimeError("TRCOMP_CONFIG does not select the jax engine: run through main()")
    torch.manual_seed(0)
    device = runtime.device()
    model = _build(spec).to(torch.bfloat16).to(device).train()
    params = sum(p.numel() for p in model.parameters())
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-4, foreach=False)
    vocab = model.config.vocab_size
    ids = torch.randint(0, vocab, (spec.batch_size, spec.seq_len)).to(device)

    def body() -> Any:
        loss = model(input_ids=ids, labels=ids).loss
        loss.backward()
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
        return loss

    step = runtime.compile_step(body)
    start = time.perf_counter()
    float(step())  # the host reads the loss: the program has run
    first = time.perf_counter() - start
    for _ in range(max(warmup - 1, 0)):
        step()
    times = []
    for _ in range(steps):
        t0 = time.perf_counter()
        float(step())
        times.append(time.perf_counter() - t0)
    import jax

    stats = jax.devices()[0].memory_stats() or {}
    peak = float(stats.get("peak_bytes_in_use", 0)) / 2**30
    tokens = spec.batch_size * spec.seq_len
    return GpuResult(
        spec.name, backend, params, tokens, first, statistics.median(times), peak, "bf16 weights"
    )


def measure(spec: ModelSpec, backend: str, steps: int, warmup: int, device: str) -> GpuResult:
    """Train ``spec`` for ``warmup + steps`` steps on ``backend`` in this process."""
    if backend in JAX_BACKENDS:
        return _measure_jax(spec, backend, steps, warmup)
    import torch

    torch.manual_seed(0)
    torch.set_float32_matmul_precision("high")
    model = _build(spec).to(device).train()
    params = sum(p.numel() for p in model.parameters())
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-4, fused=True)
    if backend == "inductor":
        model = torch.compile(model)
    elif backend == "max-autotune":
        model = torch.compile(model, mode="max-autotune")
    vocab = model.config.vocab_size
    ids = torch.randint(0, vocab, (spec.batch_size, spec.seq_len), device=device)

    def sync() -> None:
        if device == "cuda":
            torch.cuda.synchronize()

    def step() -> None:
        with torch.autocast(device_type=device, dtype=torch.bfloat16):
            loss = model(input_ids=ids, labels=ids).loss
        loss.backward()
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)

    start = time.perf_counter()
    step()
    sync()
    first = time.perf_counter() - start
    for _ in range(max(warmup - 1, 0)):
        step()
    sync()
    times = []
    for _ in range(steps):
        t0 = time.perf_counter()
        step()
        sync()
        times.append(time.perf_counter() - t0)
    peak = torch.cuda.max_memory_allocated() / 2**30 if device == "cuda" else 0.0
    tokens = spec.batch_size * spec.seq_len
    return GpuResult(spec.name, backend, params, tokens, first, statistics.median(times), peak)


def format_report(results: list[GpuResult], peak_tflops: float = PEAK_TFLOPS) -> str:
    """A markdown table: tokens/s, ratio over eager, first step, MFU, peak memory."""
    eager = {r.model: r.tokens_per_s for r in results if r.backend == "eager"}
    header = (
        "model", "backend", "precision", "params (M)", "tokens/step", "first step (s)",
        "step (ms)", "tokens/s", "vs eager", "MFU", "peak mem (GiB)",
    )  # fmt: skip
    cells = []
    for r in results:
        ratio = f"{r.tokens_per_s / eager[r.model]:.2f}x" if r.model in eager else "n/a"
        util = mfu(r.params, r.tokens_per_step, r.step_s, peak_tflops)
        cells.append((
            r.model, r.backend, r.precision, f"{r.params / 1e6:.1f}", r.tokens_per_step,
            f"{r.first_step_s:.1f}", f"{r.step_s * 1e3:.1f}", f"{r.tokens_per_s:,.0f}", ratio,
            f"{util:.1%}", f"{r.peak_mem_gb:.1f}",
        ))  # fmt: skip
    mfu_line = (
        f"MFU = 6 * params * tokens / step time / {peak_tflops:.0f} TFLOP/s (dense bf16 peak)"
    )
    return mfu_line + "\n" + table(header, cells)


def _child(args: argparse.Namespace) -> int:
    spec = (TINY if args.dry_run else MODELS)[args.one_model]
    device = "cpu" if args.dry_run else "cuda"
    result = measure(spec, args.one_backend, args.steps, args.warmup, device)
    print(MARK + json.dumps(asdict(result)), flush=True)
    return 0


def run_order(models: list[str], backends: list[str]) -> list[tuple[str, str]]:
    """Backend by backend across the models, in :data:`BACKENDS` order (max-autotune last)."""
    ranked = sorted(backends, key=lambda b: BACKENDS.index(b))
    return [(model, backend) for backend in ranked for model in models]


def _markdown(log: ResultLog) -> str:
    results = [GpuResult(**e["result"]) for e in log.entries if "result" in e]
    versions = log.meta.get("versions", {})
    head = (
        f"{log.meta.get('date')}; GPUs {versions.get('gpus')}; torch {versions.get('torch')}, "
        f"triton {versions.get('triton')}, CUDA {versions.get('cuda')}, "
        f"driver {versions.get('driver')}; dry run: {log.meta.get('dry_run')}\n\n"
    )
    skipped = [
        f"- {e['model']}/{e['backend']}: {e['status']}" for e in log.entries if "result" not in e
    ]
    measured = [
        f"- {e['model']}/zero-code: the job measured {found['speedup_vs_eager']:.2f}x vs eager "
        f"(compiled {found['compiled_step_s']:.4g} s, eager {found['eager_step_s']:.4g} s per "
        f"step), kept {found['kept']}"
        for e in log.entries
        if (found := e.get("job_speedup")) and found.get("speedup_vs_eager")
    ]
    notes = skipped + measured
    return head + format_report(results) + ("\n" + "\n".join(notes) if notes else "")


def _parse(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else None)
    parser.add_argument("--models", default=",".join(MODELS), help="comma-separated: %(default)s")
    parser.add_argument(
        "--backends", default=",".join(BACKENDS), help="comma-separated: %(default)s"
    )
    add_job_arguments(
        parser, out="h200", out_help="writes <out>.json and <out>.md as it goes", budget_s=450.0
    )
    parser.add_argument("--warmup", type=int, default=5, help="untimed steps, compile included")
    parser.add_argument(
        "--run-cap-s", type=float, default=200.0, help="limit for one (model, backend) run"
    )
    parser.add_argument("--one-model", help=argparse.SUPPRESS)
    parser.add_argument("--one-backend", help=argparse.SUPPRESS)
    return parser.parse_args(argv)


def _runner(
    args: argparse.Namespace, model: str, backend: str
) -> Callable[[float], dict[str, Any]]:
    """How one (model, backend) runs: its own process, capped, the result as a MARK line."""

    def run(cap: float) -> dict[str, Any]:
        command = [sys.executable, "-m", "trcomp_bench.gpu_h200", "--one-model", model,
                   "--one-backend", backend, "--steps", str(args.steps),
                   "--warmup", str(args.warmup)]  # fmt: skip
        command += ["--dry-run"] if args.dry_run else []
        env = None
        ranks = Path(f"{args.out}-zero-code-ranks") / model
        if backend == "zero-code":
            from trcomp_bench.gpu_check import zero_code_env

            hooked = zero_code_env(Path(f"{args.out}-zero-code"), 0 if args.dry_run else 1, ranks)
            env = {**os.environ, **hooked}
        if backend in JAX_BACKENDS:
            cache = Path(f"{args.out}-jax-cache") / model
            if backend == "jax":  # cold: an empty cache; jax-warm then reuses it
                shutil.rmtree(cache, ignore_errors=True)
            cache.mkdir(parents=True, exist_ok=True)
            env = {**os.environ, **jax_environment(cache, args.dry_run)}
        done = run_capped(command, cap, env=env)
        body = marked_json(done.stdout)
        if done.timed_out:
            return {"seconds": round(done.seconds, 1), "status": f"stopped at its {cap:.0f} s cap"}
        if done.returncode != 0 or body is None:
            status = f"exit {done.returncode}: {done.stderr[-600:]}"
            return {"seconds": round(done.seconds, 1), "status": status}
        entry = {"seconds": round(done.seconds, 1), "status": "ok", "result": body}
        if backend == "zero-code":
            from trcomp_bench.gpu_check import job_speedup

            entry["job_speedup"] = job_speedup(ranks)
        return entry

    return run


def main(argv: list[str] | None = None) -> int:
    """Run every (model, backend) in its own capped process, writing each result at once."""
    args = _parse(argv)
    run_on_torch(
        args.torch_version, "trcomp_bench.gpu_h200", sys.argv[1:] if argv is None else argv
    )
    if args.one_model:
        return _child(args)
    models = [m for m in args.models.split(",") if m]
    backends = [b for b in args.backends.split(",") if b]
    unknown = sorted(set(models) - set(MODELS)) + sorted(set(backends) - set(BACKENDS))
    if unknown:
        print(f"unknown model or backend: {', '.join(unknown)}", file=sys.stderr)
        return 2
    deadline = time.monotonic() + args.budget_s
    meta = {
        "date": time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime()),
        "dry_run": args.dry_run,
        "torch_version": args.torch_version,  # asked for; versions.torch is what ran
        "python": sys.executable,
    }
    log = ResultLog(Path(args.out), meta, _markdown)
    meta["versions"] = collect_versions()
    log.write()
    jobs = [
        Job(f"{model} {backend}", {"model": model, "backend": backend}, args.run_cap_s,
            _runner(args, model, backend))
        for model, backend in run_order(models, backends)
    ]  # fmt: skip
    failed = run_jobs(
        jobs, log, deadline=deadline, min_cap_s=30, skipped="skipped: --budget-s spent",
        tag="gpu_h200",
    )  # fmt: skip
    print((Path(args.out).with_suffix(".md")).read_text(), end="")
    return 1 if failed else 0


if __name__ == "__main__":
    raise SystemExit(main())
