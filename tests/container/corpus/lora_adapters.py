"""Pattern: LoRA-style: frozen base Linear layers, trainable low-rank adapters, 2 blocks."""

import torch
from corpus_report import Report
from torch import nn


class LoRALinear(nn.Module):
    def __init__(self, dim: int, rank: int = 4) -> None:
        super().__init__()
        self.base = nn.Linear(dim, dim)
        self.base.requires_grad_(False)
        self.down = nn.Linear(dim, rank, bias=False)
        self.up = nn.Linear(rank, dim, bias=False)
        nn.init.normal_(self.up.weight, std=0.02)  # not zero: the adapters matter from step 1

    def forward(self, x):
        return self.base(x) + self.up(self.down(x))


class Block(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.norm = nn.LayerNorm(32)
        self.norm.requires_grad_(False)
        self.proj = LoRALinear(32)
        self.out = LoRALinear(32)

    def forward(self, x):
        return x + self.out(torch.relu(self.proj(self.norm(x))))


class Net(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.embed = nn.Linear(8, 32)
        self.embed.requires_grad_(False)
        self.blocks = nn.ModuleList(Block() for _ in range(2))
        self.head = nn.Linear(32, 4)

    def forward(self, x):
        x = self.embed(x)
        for block in self.blocks:
            x = block(x)
        return self.head(x)


torch.manual_seed(0)
model = Net()
trainable = [p for p in model.parameters() if p.requires_grad]
optimizer = torch.optim.AdamW(trainable, lr=1e-2)
data = [(torch.randn(8, 8), torch.randint(0, 4, (8,))) for _ in range(20)]
report = Report()
for x, y in data:
    loss = nn.functional.cross_entropy(model(x), y)
    loss.backward()
    optimizer.step()
    optimizer.zero_grad()
    report.step(loss)
report.save(trainable=sum(p.numel() for p in trainable))
