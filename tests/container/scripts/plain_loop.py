"""A plain PyTorch training loop: no trcomp import, no torch.compile.

What most PyTorch scripts look like. Deterministic (fixed seed, no dropout, fp32),
so a compiled job and a compiler-off job can be compared loss by loss. Writes
every step's loss to <model_dir>/losses.json. ``--case`` picks the variant the
zero-code compile must handle:

- ``plain``: one transformer model, AdamW, the loss computed outside forward;
- ``teacher``: a frozen teacher in eval mode distilled into the student;
- ``untraceable``: a forward that dynamo cannot compile.

(Two models, DDP and a model the script compiles itself are corpus patterns:
tests/container/corpus/gan.py, ddp_two_ranks.py, script_compiles_model.py.)

``--layers`` sets TinyLM's number of encoder layers (repeated blocks: regional compile).
"""

from __future__ import annotations

import argparse
import json
import os
from pathlib import Path

import torch
from torch import nn


class TinyLM(nn.Module):
    def __init__(self, vocab: int = 32, width: int = 32, layers: int = 1) -> None:
        super().__init__()
        self.embed = nn.Embedding(vocab, width)
        layer = nn.TransformerEncoderLayer(
            width, 2, 2 * width, dropout=0.0, batch_first=True, norm_first=True
        )
        self.body = nn.TransformerEncoder(layer, layers, enable_nested_tensor=False)
        self.head = nn.Linear(width, vocab)

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        return self.head(self.body(self.embed(tokens)))


class Untraceable(nn.Module):
    """A forward that dynamo does not trace (as with a custom C++ or Triton kernel)."""

    def __init__(self) -> None:
        super().__init__()
        self.embed = nn.Embedding(32, 32)

    @torch.compiler.disable
    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        return self.embed(tokens)


def batches(steps: int, batch: int = 8, seq: int = 12, vocab: int = 32):
    generator = torch.Generator().manual_seed(1)
    for _ in range(steps):
        tokens = torch.randint(0, vocab, (batch, seq + 1), generator=generator)
        yield tokens[:, :-1], tokens[:, 1:]


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--steps", type=int, default=16)
    parser.add_argument("--case", default="plain")
    parser.add_argument("--layers", type=int, default=1)
    parser.add_argument("--model-dir", default=os.environ.get("SM_MODEL_DIR", "model"))
    args = parser.parse_args()
    torch.manual_seed(0)
    loss_fn = nn.CrossEntropyLoss()
    losses: list[float] = []
    model: nn.Module = Untraceable() if args.case == "untraceable" else TinyLM(layers=args.layers)
    teacher = TinyLM().eval().requires_grad_(False) if args.case == "teacher" else None
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-2)
    for x, y in batches(args.steps):
        logits = model(x)
        loss = loss_fn(logits.reshape(-1, 32), y.reshape(-1))
        if teacher is not None:
            with torch.no_grad():
                target = teacher(x).softmax(-1)
            loss = loss + nn.functional.kl_div(
                logits.log_softmax(-1), target, reduction="batchmean"
            )
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        losses.append(float(loss.detach()))
    out = Path(args.model_dir)
    out.mkdir(parents=True, exist_ok=True)
    (out / "losses.json").write_text(json.dumps(losses))


if __name__ == "__main__":
    main()
