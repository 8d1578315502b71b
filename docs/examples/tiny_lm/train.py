"""A tiny causal language model trained with plain PyTorch and trcomp's runtime helpers.

Runs unchanged with the compiler off, under inductor and under torch-xla: the
helpers pick the device, compile the model and step the optimizer the way the
backend needs. Reads token data from the ``train`` channel (``SM_CHANNEL_TRAIN``)
and saves the model to ``SM_MODEL_DIR``.
"""

from __future__ import annotations

import argparse
import os
import time
from pathlib import Path

import torch
from torch import nn

from trcomp import runtime


class TinyLM(nn.Module):
    """Embedding, a few pre-norm transformer layers with a causal mask, and a head."""

    def __init__(self, vocab: int, width: int, layers: int, heads: int, seq_len: int) -> None:
        super().__init__()
        self.embed = nn.Embedding(vocab, width)
        self.pos = nn.Parameter(torch.zeros(seq_len, width))
        layer = nn.TransformerEncoderLayer(
            width, heads, 4 * width, dropout=0.0, batch_first=True, norm_first=True
        )
        self.body = nn.TransformerEncoder(layer, layers, enable_nested_tensor=False)
        self.head = nn.Linear(width, vocab)
        mask = torch.triu(torch.full((seq_len, seq_len), float("-inf")), diagonal=1)
        self.register_buffer("mask", mask, persistent=False)

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        hidden = self.embed(tokens) + self.pos
        return self.head(self.body(hidden, mask=self.mask, is_causal=True))


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--steps", type=int, default=40)
    parser.add_argument("--batch-size", type=int, default=16)
    parser.add_argument("--width", type=int, default=64)
    parser.add_argument("--layers", type=int, default=2)
    parser.add_argument("--lr", type=float, default=3e-3)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()

    torch.manual_seed(args.seed)
    data = torch.load(Path(os.environ.get("SM_CHANNEL_TRAIN", "data")) / "tokens.pt")
    tokens, vocab = data["tokens"], int(data["vocab"])
    seq_len = tokens.shape[1] - 1

    device = runtime.device()
    model = TinyLM(vocab, args.width, args.layers, 4, seq_len).to(device)
    step_model = runtime.compile(model)
    optimizer = torch.optim.AdamW(model.parameters(), lr=args.lr)
    loss_fn = nn.CrossEntropyLoss()
    print(
        f"backend={runtime.backend() or 'eager'} device={device} params="
        f"{sum(p.numel() for p in model.parameters())}",
        flush=True,
    )

    started = time.monotonic()
    for step in range(args.steps):
        start = (step * args.batch_size) % (len(tokens) - args.batch_size)
        batch = tokens[start : start + args.batch_size].to(device)
        logits = step_model(batch[:, :-1])
        loss = loss_fn(logits.reshape(-1, vocab), batch[:, 1:].reshape(-1))
        optimizer.zero_grad()
        loss.backward()
        runtime.optimizer_step(optimizer)
        runtime.mark_step()
        if step % 10 == 0 or step == args.steps - 1:
            print(
                f"step={step} loss={loss.item():.4f} elapsed_s={time.monotonic() - started:.1f}",
                flush=True,
            )

    model_dir = Path(os.environ.get("SM_MODEL_DIR", "model"))
    runtime.save(model.state_dict(), model_dir / "model.pt")
    print(f"final_loss={loss.item():.6f}", flush=True)


if __name__ == "__main__":
    main()
