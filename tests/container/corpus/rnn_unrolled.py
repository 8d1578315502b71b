"""Pattern: an LSTMCell unrolled in Python over a long sequence (sequence prediction).

The public sequence-prediction example loops an LSTMCell over 999 steps in its
forward; compiling it unrolls the loop into one graph (25 minutes of inductor on
this machine, then a RecursionError). Here 100 steps: the hook must see the loop
before compiling and leave the model eager, saying why.
"""

import torch
from corpus_report import Report
from torch import nn


class Sequence(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.cell = nn.LSTMCell(1, 16)
        self.head = nn.Linear(16, 1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = c = torch.zeros(x.size(0), 16)
        outputs = []
        for step in x.split(1, dim=1):
            h, c = self.cell(step, (h, c))
            outputs.append(self.head(h))
        return torch.cat(outputs, dim=1)


torch.manual_seed(0)
model = Sequence()
t = torch.arange(101, dtype=torch.float32) / 20
waves = torch.sin(t + torch.rand(8, 1) * 6)
x, y = waves[:, :-1], waves[:, 1:]
opt = torch.optim.Adam(model.parameters(), lr=0.01)
report = Report()
for _ in range(6):
    opt.zero_grad()
    loss = (model(x) - y).pow(2).mean()
    loss.backward()
    opt.step()
    report.step(loss)
report.check(final=float((model(x) - y).pow(2).mean()))
report.save()
