"""A plain PyTorch training loop that uses the trcomp.runtime helpers.

Deterministic (fixed seed, no dropout), so eager, inductor and xla runs can be
compared. Writes the final loss to <model_dir>/loss.json and the weights with
runtime.save.
"""

from __future__ import annotations

import argparse
import json
import os
from pathlib import Path

import torch
from torch import nn

from trcomp import runtime


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--steps", type=int, default=20)
    parser.add_argument("--batch-size", type=int, default=16)
    parser.add_argument("--hidden", type=int, default=64)
    parser.add_argument("--lr", type=float, default=0.05)
    parser.add_argument("--model-dir", default=os.environ.get("SM_MODEL_DIR", "model"))
    args = parser.parse_args()

    torch.manual_seed(0)
    features = torch.randn(args.steps * args.batch_size, 32)
    targets = (features[:, :4].sum(dim=1) > 0).long()
    batches = [
        (features[i : i + args.batch_size], targets[i : i + args.batch_size])
        for i in range(0, len(features), args.batch_size)
    ]

    device = runtime.device()
    model = nn.Sequential(
        nn.Linear(32, args.hidden),
        nn.LayerNorm(args.hidden),
        nn.ReLU(),
        nn.Dropout(0.0),
        nn.Linear(args.hidden, 2),
    ).to(device)
    step_model = runtime.compile(model)
    optimizer = torch.optim.SGD(model.parameters(), lr=args.lr, momentum=0.9)
    loss_fn = nn.CrossEntropyLoss()

    losses = []
    for x, y in runtime.wrap_loader(batches):
        loss = loss_fn(step_model(x), y)
        loss.backward()
        runtime.optimizer_step(optimizer)
        optimizer.zero_grad()
        losses.append(loss.detach())
    final = float(losses[-1].cpu())
    print(f"final_loss={final:.6f} backend={runtime.backend()}")
    if int(os.environ.get("RANK", "0")) == 0:
        Path(args.model_dir).mkdir(parents=True, exist_ok=True)
        (Path(args.model_dir) / "loss.json").write_text(
            json.dumps({"loss": final, "backend": runtime.backend(), "steps": len(losses)})
        )
    runtime.save(model.state_dict(), Path(args.model_dir) / "model.pt")


if __name__ == "__main__":
    main()
