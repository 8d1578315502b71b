"""A plain PyTorch training loop: no trcomp import, no torch.compile.

What most PyTorch scripts look like. Deterministic (fixed seed, no dropout, fp32),
so a compiled job and a compiler-off job can be compared loss by loss. Writes
every step's loss to <model_dir>/losses.json. ``--case`` picks the variant the
zero-code compile must handle:

- ``plain``: one transformer model, AdamW, the loss computed outside forward;
- ``eval``: an evaluation under ``torch.no_grad()`` in eval mode every 5 steps;
- ``gan``: a generator and a discriminator, each with its own optimizer;
- ``teacher``: a frozen teacher in eval mode distilled into the student;
- ``untraceable``: a forward that dynamo cannot compile;
- ``ddp``: the model wrapped in DDP (run it under torchrun, gloo on CPU);
- ``compiled``: the script compiles its model itself (torch.compile).

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
    rank = 0
    if args.case == "ddp":
        import torch.distributed as dist

        dist.init_process_group("gloo")
        rank = dist.get_rank()
    if args.case == "gan":
        losses = train_gan(args.steps)
    else:
        model: nn.Module = (
            Untraceable() if args.case == "untraceable" else TinyLM(layers=args.layers)
        )
        if args.case == "ddp":
            model = nn.parallel.DistributedDataParallel(model)
        if args.case == "compiled":
            model = torch.compile(model)
        teacher = TinyLM().eval().requires_grad_(False) if args.case == "teacher" else None
        optimizer = torch.optim.AdamW(model.parameters(), lr=1e-2)
        for step, (x, y) in enumerate(batches(args.steps)):
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
            if args.case == "eval" and step % 5 == 4:
                model.eval()
                with torch.no_grad():
                    model(x)
                model.train()
    if rank == 0:
        out = Path(args.model_dir)
        out.mkdir(parents=True, exist_ok=True)
        (out / "losses.json").write_text(json.dumps(losses))


def train_gan(steps: int) -> list[float]:
    generator = nn.Sequential(nn.Linear(8, 32), nn.ReLU(), nn.Linear(32, 16))
    discriminator = nn.Sequential(nn.Linear(16, 32), nn.LeakyReLU(0.2), nn.Linear(32, 1))
    opt_g = torch.optim.Adam(generator.parameters(), lr=1e-3)
    opt_d = torch.optim.Adam(discriminator.parameters(), lr=1e-3)
    bce = nn.BCEWithLogitsLoss()
    noise = torch.Generator().manual_seed(2)
    losses = []
    for _ in range(steps):
        real = torch.randn(16, 16, generator=noise) + 1.0
        fake = generator(torch.randn(16, 8, generator=noise))
        loss_d = bce(discriminator(real), torch.ones(16, 1)) + bce(
            discriminator(fake.detach()), torch.zeros(16, 1)
        )
        opt_d.zero_grad()
        loss_d.backward()
        opt_d.step()
        loss_g = bce(discriminator(fake), torch.ones(16, 1))
        opt_g.zero_grad()
        loss_g.backward()
        opt_g.step()
        losses.append(float(loss_d.detach()) + float(loss_g.detach()))
    return losses


if __name__ == "__main__":
    main()
