"""Pattern: activation checkpointing per block (torch.utils.checkpoint, use_reentrant=False)."""

import torch
from corpus_report import Report
from torch import nn
from torch.utils.checkpoint import checkpoint


class Block(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.norm = nn.LayerNorm(32)
        self.mlp = nn.Sequential(nn.Linear(32, 32), nn.GELU(), nn.Linear(32, 32))

    def forward(self, x):
        return x + self.mlp(self.norm(x))


class Net(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.embed = nn.Linear(8, 32)
        self.blocks = nn.ModuleList(Block() for _ in range(2))
        self.head = nn.Linear(32, 1)

    def forward(self, x):
        x = self.embed(x)
        for block in self.blocks:
            x = checkpoint(block, x, use_reentrant=False)
        return self.head(x)


torch.manual_seed(0)
model = Net()
optimizer = torch.optim.AdamW(model.parameters(), lr=1e-2)
data = [(torch.randn(8, 8), torch.randn(8, 1)) for _ in range(20)]
report = Report()
for x, y in data:
    loss = nn.functional.mse_loss(model(x), y)
    loss.backward()
    optimizer.step()
    optimizer.zero_grad()
    report.step(loss)
report.save()
