"""Pattern: Python state on the model that forward changes: a call counter driving a
warm-up, a list of past statistics, a dict of what forward saw (dynamo records these
changes and replays them once after the graph: a check must not make them twice)."""

import torch
from corpus_report import Report
from torch import nn


class Scheduled(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.body = nn.Sequential(nn.Linear(8, 32), nn.GELU(), nn.Linear(32, 1))
        self.calls = 0
        self.norms: list[float] = []
        self.seen = {"batches": 0}

    def forward(self, x):
        self.calls += 1
        self.seen["batches"] += x.shape[0]
        out = self.body(x)
        warmup = min(1.0, self.calls / 5)
        return out * warmup


torch.manual_seed(0)
model = Scheduled()
opt = torch.optim.SGD(model.parameters(), lr=0.05)
report = Report()
for _ in range(14):
    x = torch.randn(16, 8)
    loss = model(x).pow(2).mean()
    opt.zero_grad()
    loss.backward()
    opt.step()
    model.norms.append(float(loss))
    report.step(loss)
report.check(calls=model.calls, batches=model.seen["batches"], norms=len(model.norms))
report.save()
