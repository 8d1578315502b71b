"""GPU benchmark for one H200, container-free: eager against inductor and max-autotune.

Run it on a machine with one NVIDIA H200, torch 2.9 and transformers (no
trcomp image, no downloads; this file imports nothing else from trcomp)::

    python sdk/trcomp/bench/gpu_h200.py --json h200.json     # about 6-8 minutes
    python sdk/trcomp/bench/gpu_h200.py --dry-run             # tiny, on CPU, seconds

It trains GPT-2 small (124M, seq 1024) and BERT-base (110M, masked LM, seq 512)
from their configs with random weights, bf16 autocast and fused AdamW, each
backend in its own process, and prints per model: tokens/s, the throughput
ratio over eager, time to first step (compilation) and the model FLOPs
utilisation, MFU = 6 * parameters * tokens per step / step time / peak, with
the peak :data:`PEAK_TFLOPS` (H200 SXM dense bf16, no sparsity). 6·N·tokens
ignores attention's own FLOPs, so MFU is slightly understated for long sequences.
A run that would not finish inside ``--budget-s`` is skipped and reported.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import time
from dataclasses import asdict, dataclass
from typing import Any

__all__ = [
    "BACKENDS",
    "MODELS",
    "PEAK_TFLOPS",
    "GpuResult",
    "ModelSpec",
    "format_report",
    "main",
    "mfu",
    "train_flops_per_step",
]

PEAK_TFLOPS = 989.0  # H200 SXM, dense bf16 tensor cores (1979 is the 2:4-sparse figure)
BACKENDS = ("eager", "inductor", "max-autotune")
_MARK = "GPU_H200_RESULT "


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


def measure(spec: ModelSpec, backend: str, steps: int, warmup: int, device: str) -> GpuResult:
    """Train ``spec`` for ``warmup + steps`` steps on ``backend`` in this process."""
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
    lines = [
        f"MFU = 6 * params * tokens / step time / {peak_tflops:.0f} TFLOP/s (dense bf16 peak)",
        "| model | backend | params (M) | tokens/step | first step (s) | step (ms) "
        "| tokens/s | vs eager | MFU | peak mem (GiB) |",
        "|" + "---|" * 10,
    ]
    for r in results:
        ratio = f"{r.tokens_per_s / eager[r.model]:.2f}x" if r.model in eager else "n/a"
        util = mfu(r.params, r.tokens_per_step, r.step_s, peak_tflops)
        lines.append(
            f"| {r.model} | {r.backend} | {r.params / 1e6:.1f} | {r.tokens_per_step} "
            f"| {r.first_step_s:.1f} | {r.step_s * 1e3:.1f} | {r.tokens_per_s:,.0f} "
            f"| {ratio} | {util:.1%} | {r.peak_mem_gb:.1f} |"
        )
    return "\n".join(lines) + "\n"


def _child(args: argparse.Namespace) -> int:
    spec = (TINY if args.dry_run else MODELS)[args.one_model]
    device = "cpu" if args.dry_run else "cuda"
    result = measure(spec, args.one_backend, args.steps, args.warmup, device)
    print(_MARK + json.dumps(asdict(result)), flush=True)
    return 0


def _parse(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else None)
    parser.add_argument("--models", default=",".join(MODELS), help="comma-separated: %(default)s")
    parser.add_argument(
        "--backends", default=",".join(BACKENDS), help="comma-separated: %(default)s"
    )
    parser.add_argument("--steps", type=int, default=20, help="timed steps (default: 20)")
    parser.add_argument("--warmup", type=int, default=5, help="untimed steps, compile included")
    parser.add_argument(
        "--budget-s", type=float, default=450.0, help="whole-run limit; later runs skip once spent"
    )
    parser.add_argument("--json", help="also write the results as JSON here")
    parser.add_argument(
        "--dry-run", action="store_true", help="tiny configs on CPU: checks the script, not the GPU"
    )
    parser.add_argument("--one-model", help=argparse.SUPPRESS)
    parser.add_argument("--one-backend", help=argparse.SUPPRESS)
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    """Run every (model, backend) in its own process and print the report."""
    args = _parse(argv)
    if args.one_model:
        return _child(args)
    models = [m for m in args.models.split(",") if m]
    backends = [b for b in args.backends.split(",") if b]
    unknown = sorted(set(models) - set(MODELS)) + sorted(set(backends) - set(BACKENDS))
    if unknown:
        print(f"unknown model or backend: {', '.join(unknown)}", file=sys.stderr)
        return 2
    deadline = time.monotonic() + args.budget_s
    results: list[GpuResult] = []
    failures: list[str] = []
    for model in models:
        for backend in backends:
            left = deadline - time.monotonic()
            if left < 30:
                failures.append(f"{model}/{backend}: skipped, --budget-s spent")
                continue
            command = [sys.executable, __file__, "--one-model", model, "--one-backend", backend,
                       "--steps", str(args.steps), "--warmup", str(args.warmup)]  # fmt: skip
            command += ["--dry-run"] if args.dry_run else []
            print(f"[gpu_h200] {model} {backend} ...", file=sys.stderr, flush=True)
            try:
                proc = subprocess.run(command, capture_output=True, text=True, timeout=left)
            except subprocess.TimeoutExpired:
                failures.append(f"{model}/{backend}: did not finish within the budget")
                continue
            lines = [ln for ln in proc.stdout.splitlines() if ln.startswith(_MARK)]
            if proc.returncode != 0 or not lines:
                failures.append(f"{model}/{backend}: exit {proc.returncode}: {proc.stderr[-600:]}")
                continue
            results.append(GpuResult(**json.loads(lines[-1][len(_MARK) :])))
    print(format_report(results), end="")
    for failure in failures:
        print(f"[gpu_h200] {failure}", file=sys.stderr)
    if args.json:
        with open(args.json, "w") as fh:
            json.dump([asdict(r) for r in results], fh, indent=2)
    return 1 if failures else 0


if __name__ == "__main__":
    raise SystemExit(main())
