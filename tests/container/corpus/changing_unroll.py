"""Pattern: a forward whose Python loop count is an attribute the loop raises every step.

A curriculum on the number of refinement iterations (one shared layer applied
``model.iterations`` times). Each new count is a new graph for dynamo, so a
compiled job meets dynamo's recompile limit within the first ten steps.
"""

import torch
from corpus_report import Report
from torch import nn


class Refiner(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.inp = nn.Linear(8, 32)
        self.step = nn.Linear(32, 32)
        self.out = nn.Linear(32, 1)
        self.iterations = 1

    def forward(self, x):
        h = torch.tanh(self.inp(x))
        for _ in range(self.iterations):
            h = h + 0.1 * torch.tanh(self.step(h))
        return self.out(h)


torch.manual_seed(0)
model = Refiner()
optimizer = torch.optim.Adam(model.parameters(), lr=1e-2)
data = [(torch.randn(8, 8), torch.randn(8, 1)) for _ in range(20)]
report = Report()
for step, (x, y) in enumerate(data):
    model.iterations = 1 + step
    loss = nn.functional.mse_loss(model(x), y)
    loss.backward()
    optimizer.step()
    optimizer.zero_grad()
    report.step(loss)
report.save()
