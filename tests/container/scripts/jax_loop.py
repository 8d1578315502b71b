"""A plain PyTorch loop whose step goes through trcomp.runtime.compile_step.

Deterministic (fixed seed, no dropout), so a job on the jax engine can be
compared with the same job with the compiler off. Writes every step's loss to
<model_dir>/losses.json and the weights with runtime.save.
"""

from __future__ import annotations

import argparse
import json
import os
from pathlib import Path

import torch
from torch import nn

from trcomp import runtime

VOCAB = 64


class TinyLM(nn.Module):
    """Embedding, LayerNorm, an MLP and a head tied to the embedding."""

    def __init__(self, width: int) -> None:
        super().__init__()
        self.embed = nn.Embedding(VOCAB, width)
        self.norm = nn.LayerNorm(width)
        self.mlp = nn.Sequential(
            nn.Linear(width, 4 * width), nn.GELU(), nn.Linear(4 * width, width)
        )
        self.head = nn.Linear(width, VOCAB, bias=False)
        self.head.weight = self.embed.weight
        nn.init.normal_(self.embed.weight, std=0.02)

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        hidden = self.embed(tokens)
        hidden = hidden + self.mlp(self.norm(hidden))
        return self.head(hidden)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--steps", type=int, default=12)
    parser.add_argument("--width", type=int, default=32)
    parser.add_argument("--model-dir", default=os.environ.get("SM_MODEL_DIR", "model"))
    args = parser.parse_args()

    torch.manual_seed(0)
    data = torch.randint(0, VOCAB, (args.steps, 8, 17))
    batches = [(seq[:, :-1], seq[:, 1:]) for seq in data]

    model = TinyLM(args.width).to(runtime.device())
    optimizer = torch.optim.AdamW(model.parameters(), lr=3e-3)
    scheduler = torch.optim.lr_scheduler.StepLR(optimizer, step_size=5, gamma=0.5)

    @runtime.compile_step
    def train_step(tokens: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
        optimizer.zero_grad()
        logits = model(tokens)
        loss = nn.functional.cross_entropy(logits.reshape(-1, VOCAB), targets.reshape(-1))
        loss.backward()
        nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        optimizer.step()
        scheduler.step()
        return loss

    losses = [float(train_step(x, y).item()) for x, y in runtime.wrap_loader(batches)]
    print(f"final_loss={losses[-1]:.6f} engine={runtime.engine()}")
    Path(args.model_dir).mkdir(parents=True, exist_ok=True)
    (Path(args.model_dir) / "losses.json").write_text(
        json.dumps({"losses": losses, "engine": runtime.engine()})
    )
    runtime.save(model.state_dict(), Path(args.model_dir) / "model.pt")


if __name__ == "__main__":
    main()
