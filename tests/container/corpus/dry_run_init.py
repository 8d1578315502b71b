"""Pattern: a model that calls its feature extractor once in ``__init__`` to size its head."""

import torch
from corpus_report import Report
from torch import nn


class Net(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.features = nn.Sequential(nn.Linear(8, 24), nn.ReLU(), nn.Linear(24, 16), nn.Tanh())
        width = self.features(torch.zeros(1, 8)).shape[1]
        self.head = nn.Linear(width, 1)

    def forward(self, x):
        return self.head(self.features(x))


torch.manual_seed(0)
model = Net()
opt = torch.optim.SGD(model.parameters(), lr=0.05)
report = Report()
for _ in range(16):
    loss = (model(torch.randn(8, 8)) - 1).pow(2).mean()
    opt.zero_grad()
    loss.backward()
    opt.step()
    report.step(loss)
report.save()
