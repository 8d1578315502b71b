"""Pattern: export after training with torch.jit.trace and torch.jit.script (repeated blocks).

The script checks itself that both exported modules give the trained model's outputs.
"""

import torch
from corpus_report import Report
from torch import nn


class Block(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.norm = nn.LayerNorm(32)
        self.proj = nn.Linear(32, 32)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x + torch.relu(self.proj(self.norm(x)))


class Net(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.embed = nn.Linear(8, 32)
        self.blocks = nn.ModuleList([Block() for _ in range(2)])
        self.head = nn.Linear(32, 1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.embed(x)
        for block in self.blocks:
            x = block(x)
        return self.head(x)


torch.manual_seed(0)
model = Net()
optimizer = torch.optim.Adam(model.parameters(), lr=1e-2)
data = [(torch.randn(8, 8), torch.randn(8, 1)) for _ in range(20)]
report = Report()
for x, y in data:
    loss = nn.functional.mse_loss(model(x), y)
    loss.backward()
    optimizer.step()
    optimizer.zero_grad()
    report.step(loss)

model.eval()
probe = torch.randn(8, 8)
with torch.no_grad():
    expected = model(probe)
    traced = torch.jit.trace(model, probe)
    scripted = torch.jit.script(model)
    torch.testing.assert_close(traced(probe), expected)
    torch.testing.assert_close(scripted(probe), expected)
report.check(exported=expected)
report.save()
