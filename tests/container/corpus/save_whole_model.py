"""Pattern: the whole model saved with torch.save(model) after training and loaded back.

Repeated blocks (a ModuleList of one block class), as in every transformer. The
script checks itself that the loaded model gives the trained model's outputs.
"""

import os
import tempfile
from pathlib import Path

import torch
from corpus_report import Report
from torch import nn


class Block(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.norm = nn.LayerNorm(32)
        self.proj = nn.Linear(32, 32)

    def forward(self, x):
        return x + torch.relu(self.proj(self.norm(x)))


class Net(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.embed = nn.Linear(8, 32)
        self.blocks = nn.ModuleList(Block() for _ in range(2))
        self.head = nn.Linear(32, 1)

    def forward(self, x):
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

path = Path(os.environ.get("SM_MODEL_DIR") or tempfile.mkdtemp()) / "model.pt"
torch.save(model, path)
loaded = torch.load(path, weights_only=False)
probe = torch.randn(8, 8)
with torch.no_grad():
    expected, got = model(probe), loaded(probe)
torch.testing.assert_close(got, expected)
report.check(reloaded=got)
report.save()
