"""Pattern: a small data function the script compiles itself (@torch.compile), called first."""

import torch
from corpus_report import Report
from torch import nn


@torch.compile
def standardize(x):
    return (x - x.mean(dim=0)) / (x.std(dim=0) + 1e-5)


torch.manual_seed(0)
model = nn.Sequential(nn.Linear(8, 32), nn.ReLU(), nn.Linear(32, 1))
optimizer = torch.optim.SGD(model.parameters(), lr=0.05)
data = [(torch.randn(8, 8) * 3 + 1, torch.randn(8, 1)) for _ in range(20)]
report = Report()
for x, y in data:
    loss = nn.functional.mse_loss(model(standardize(x)), y)
    loss.backward()
    optimizer.step()
    optimizer.zero_grad()
    report.step(loss)
report.save()
