"""Pattern: FSDP2 (fully_shard on each block, then the root) on two gloo ranks (torchrun).

# corpus: 2 ranks
"""

import torch
import torch.distributed as dist
from corpus_report import Report
from torch import nn
from torch.distributed.fsdp import fully_shard


class Block(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.norm = nn.LayerNorm(16)
        self.lin = nn.Linear(16, 16)

    def forward(self, x):
        return x + torch.tanh(self.lin(self.norm(x)))


class Net(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.blocks = nn.ModuleList(Block() for _ in range(3))
        self.head = nn.Linear(16, 1)

    def forward(self, x):
        for block in self.blocks:
            x = block(x)
        return self.head(x)


dist.init_process_group("gloo")
rank = dist.get_rank()
torch.manual_seed(0)
model = Net()
for block in model.blocks:
    fully_shard(block)
fully_shard(model)
optimizer = torch.optim.AdamW(model.parameters(), lr=1e-2)
generator = torch.Generator().manual_seed(rank)
report = Report()
for _ in range(20):
    x, y = torch.randn(8, 16, generator=generator), torch.randn(8, 1, generator=generator)
    loss = nn.functional.mse_loss(model(x), y)
    loss.backward()
    optimizer.step()
    optimizer.zero_grad()
    report.step(loss)
shard = model.head.weight.to_local().detach().flatten()  # this rank's shard of a DTensor
report.check(head_shard=shard)
if rank == 0:
    report.save()
dist.destroy_process_group()
