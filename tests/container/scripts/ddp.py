"""torchrun + DDP on CPU (gloo) with the trcomp.runtime helpers."""

from __future__ import annotations

import json
import os
from pathlib import Path

import torch
import torch.distributed as dist
from torch import nn

from trcomp import runtime

dist.init_process_group("gloo")
rank, world = dist.get_rank(), dist.get_world_size()
torch.manual_seed(0)
model = nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Linear(16, 1))
# Compile the module, then wrap it: with torch 2.9 on CPU, compiling the DDP wrapper
# itself broke the graph at DDP's forward and compiled nothing.
ddp = nn.parallel.DistributedDataParallel(runtime.compile(model))
optimizer = torch.optim.SGD(model.parameters(), lr=0.05)
generator = torch.Generator().manual_seed(rank)
for _ in range(8):
    x = torch.randn(4, 8, generator=generator)
    loss = ddp(x).pow(2).mean()
    loss.backward()
    runtime.optimizer_step(optimizer)
    optimizer.zero_grad()
weights = [p.detach().clone() for p in model.parameters()]
gathered = [torch.zeros_like(weights[0]) for _ in range(world)]
dist.all_gather(gathered, weights[0])
in_sync = all(torch.equal(gathered[0], other) for other in gathered)
model_dir = Path(os.environ["SM_MODEL_DIR"])
if rank == 0:
    (model_dir / "ddp.json").write_text(
        json.dumps({"world": world, "in_sync": in_sync, "backend": runtime.backend()})
    )
runtime.save(model.state_dict(), model_dir / "model.pt")
dist.destroy_process_group()
