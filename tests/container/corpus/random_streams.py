"""Pattern: random numbers drawn inside forward from Python's random (LayerDrop), numpy
(noise) and a torch.Generator the model owns, and from torch's default generator after
training: a check must draw none of them a second time."""

import random

import numpy as np
import torch
from corpus_report import Report
from torch import nn


class Drawn(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.layers = nn.ModuleList(nn.Linear(16, 16) for _ in range(3))
        self.head = nn.Linear(16, 1)
        self.generator = torch.Generator().manual_seed(7)

    def forward(self, x):
        x = x + 0.1 * torch.randn(x.shape, generator=self.generator)
        for layer in self.layers:
            if random.random() < 0.3:  # LayerDrop
                continue
            x = torch.tanh(layer(x))
        return self.head(x) + float(np.random.rand())


torch.manual_seed(0)
random.seed(0)
np.random.seed(0)
model = Drawn()
opt = torch.optim.SGD(model.parameters(), lr=0.05)
report = Report()
for _ in range(14):
    loss = model(torch.randn(16, 16)).pow(2).mean()
    opt.zero_grad()
    loss.backward()
    opt.step()
    report.step(loss)
report.check(after=torch.randn(4), python=random.random(), numpy=float(np.random.rand()))
report.save()
