"""A plain PyTorch loop for the docs/v3.md example: it runs unchanged with the compiler on.

trcomp.runtime picks the device, compiles the model as the job's compiler config
says (eager outside a trcomp job) and steps the optimizer the way the backend needs.
"""

from __future__ import annotations

import argparse
import json
import os
from pathlib import Path

import torch
from torch import nn

from trcomp import runtime

parser = argparse.ArgumentParser()
parser.add_argument("--steps", type=int, default=30)
parser.add_argument("--lr", type=float, default=0.05)
args = parser.parse_args()

torch.manual_seed(0)
model = nn.Sequential(nn.Linear(16, 32), nn.ReLU(), nn.Linear(32, 1)).to(runtime.device())
step = runtime.compile(model)
optimizer = torch.optim.SGD(model.parameters(), lr=args.lr)
for _ in range(args.steps):
    x = torch.randn(8, 16, device=runtime.device())
    loss = (step(x) - x.sum(dim=1, keepdim=True)).pow(2).mean()
    loss.backward()
    runtime.optimizer_step(optimizer)
    optimizer.zero_grad()

model_dir = Path(os.environ.get("SM_MODEL_DIR", "model"))
model_dir.mkdir(parents=True, exist_ok=True)
result = {"loss": float(loss), "backend": runtime.backend()}
(model_dir / "result.json").write_text(json.dumps(result))
runtime.save(model.state_dict(), model_dir / "model.pt")
