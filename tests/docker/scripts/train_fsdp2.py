"""A plain FSDP2 loop for the Docker tests: no trcomp import, ``fully_shard`` on each block.

Under torchrun (``torch_distributed``) over gloo: reads numbers from the
``training`` channel, each rank its own half, fits y = 3x + 1 through three
residual blocks; rank 0 writes every step's loss (``losses.json``) to the
model dir. Run it with the compiler off (no start-up hook) for the reference.
"""

from __future__ import annotations

import json
import os
import socket
from pathlib import Path

import torch
import torch.distributed as dist
from torch import nn
from torch.distributed.fsdp import fully_shard


class Block(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.norm = nn.LayerNorm(8)
        self.lin = nn.Linear(8, 8)

    def forward(self, x):
        return x + torch.tanh(self.lin(self.norm(x)))


class Net(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.embed = nn.Linear(1, 8)
        self.blocks = nn.ModuleList(Block() for _ in range(3))
        self.head = nn.Linear(8, 1)

    def forward(self, x):
        x = self.embed(x)
        for block in self.blocks:
            x = block(x)
        return self.head(x)


def main() -> None:
    dist.init_process_group("gloo")
    rank, world = dist.get_rank(), dist.get_world_size()
    channel = Path(os.environ["SM_CHANNEL_TRAINING"])
    x = torch.tensor([float(v) for v in (channel / "numbers.txt").read_text().split()]) / 64
    x = x.reshape(-1, 1)[rank::world]
    y = 3 * x + 1
    torch.manual_seed(0)
    model = Net()
    for block in model.blocks:
        fully_shard(block)
    fully_shard(model)
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-2)
    losses = []
    for _ in range(10):
        loss = nn.functional.mse_loss(model(x), y)
        loss.backward()
        optimizer.step()
        optimizer.zero_grad()
        losses.append(loss.item())
    print(f"rank {rank}/{world} on {socket.gethostname()}: loss {losses[-1]:.4f}", flush=True)
    if rank == 0:
        model_dir = Path(os.environ["SM_MODEL_DIR"])
        model_dir.mkdir(parents=True, exist_ok=True)
        hosts = json.loads(os.environ.get("SM_HOSTS", "[]"))
        (model_dir / "losses.json").write_text(json.dumps({"losses": losses, "hosts": hosts}))
    dist.barrier()
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
