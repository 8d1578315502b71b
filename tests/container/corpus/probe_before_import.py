"""Pattern: a library probes for torch before the script imports it (as ``import datasets``
does with importlib.util.find_spec("torch"))."""

import importlib.util

assert importlib.util.find_spec("torch") is not None

import torch  # noqa: E402
from corpus_report import Report  # noqa: E402
from torch import nn  # noqa: E402

torch.manual_seed(0)
model = nn.Sequential(nn.Linear(8, 32), nn.ReLU(), nn.Linear(32, 1))
opt = torch.optim.SGD(model.parameters(), lr=0.05)
report = Report()
for _ in range(16):
    loss = (model(torch.randn(8, 8)) - 1).pow(2).mean()
    opt.zero_grad()
    loss.backward()
    opt.step()
    report.step(loss)
report.save()
