"""Pattern: a forward that reads a float attribute the loop changes every step (a schedule)."""

import torch
from corpus_report import Report
from torch import nn


class Net(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.body = nn.Sequential(nn.Linear(8, 32), nn.ReLU(), nn.Linear(32, 4))
        self.temperature = 2.0

    def forward(self, x):
        return self.body(x) / self.temperature


torch.manual_seed(0)
model = Net()
optimizer = torch.optim.Adam(model.parameters(), lr=1e-2)
data = [(torch.randn(8, 8), torch.randint(0, 4, (8,))) for _ in range(20)]
report = Report()
for step, (x, y) in enumerate(data):
    model.temperature = 2.0 - 0.05 * step  # annealed each step
    loss = nn.functional.cross_entropy(model(x), y)
    loss.backward()
    optimizer.step()
    optimizer.zero_grad()
    report.step(loss)
report.save()
