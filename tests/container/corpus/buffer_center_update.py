"""Pattern: DINO-style centering: forward reads a buffer, then updates it in place under no_grad.

torch 2.9's compiled backward reads the buffer after the update (plain
torch.compile and aot_eager alike): trcomp's verification must catch it and
keep the model eager.
"""

import torch
from corpus_report import Report
from torch import nn


class Centered(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.embed = nn.Linear(8, 16)
        self.head = nn.Linear(16, 4)
        self.register_buffer("center", torch.zeros(16))

    def forward(self, x):
        h = torch.tanh(self.embed(x))
        out = self.head(h * (h - self.center))
        with torch.no_grad():
            self.center.mul_(0.9).add_(h.mean(0), alpha=0.1)
        return out


torch.manual_seed(0)
model = Centered()
opt = torch.optim.SGD(model.parameters(), lr=0.1)
report = Report()
for _ in range(16):
    loss = model(torch.randn(12, 8)).pow(2).mean()
    opt.zero_grad()
    loss.backward()
    opt.step()
    report.step(loss)
report.check(center=model.center)
report.save()
