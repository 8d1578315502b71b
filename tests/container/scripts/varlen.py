"""A plain loop whose sequence length changes from step to step (the PGO test).

Under ``torch.compile``'s automatic dynamic shapes the first length compiles a
static graph and the second one a recompile with the length dynamic; dynamo's
profile-guided state (PGO) lets a later job compile the dynamic graph at once.
"""

from __future__ import annotations

import argparse
import json
import os
from pathlib import Path

import torch
from torch import nn

from trcomp import runtime

VOCAB = 32


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--steps", type=int, default=8)
    parser.add_argument("--model-dir", default=os.environ.get("SM_MODEL_DIR", "model"))
    args = parser.parse_args()

    torch.manual_seed(0)
    model = nn.Sequential(nn.Embedding(VOCAB, 16), nn.Linear(16, VOCAB)).to(runtime.device())
    step_model = runtime.compile(model)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    losses = []
    for step in range(args.steps):
        length = 6 + 2 * (step % 4)  # 6, 8, 10, 12, 6, ...
        tokens = torch.randint(0, VOCAB, (4, length + 1), device=runtime.device())
        logits = step_model(tokens[:, :-1])
        loss = nn.functional.cross_entropy(logits.reshape(-1, VOCAB), tokens[:, 1:].reshape(-1))
        loss.backward()
        runtime.optimizer_step(optimizer)
        optimizer.zero_grad()
        losses.append(float(loss.detach()))
    Path(args.model_dir).mkdir(parents=True, exist_ok=True)
    (Path(args.model_dir) / "losses.json").write_text(json.dumps({"losses": losses}))


if __name__ == "__main__":
    main()
