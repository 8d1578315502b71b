"""Pattern: a model whose forward returns a dataclass (as HF ModelOutput-style code does)."""

from dataclasses import dataclass

import torch
from corpus_report import Report
from torch import nn


@dataclass
class Output:
    logits: torch.Tensor
    hidden: torch.Tensor


class Net(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.body = nn.Linear(8, 32)
        self.head = nn.Linear(32, 3)

    def forward(self, x):
        hidden = torch.relu(self.body(x))
        return Output(logits=self.head(hidden), hidden=hidden)


torch.manual_seed(0)
model = Net()
optimizer = torch.optim.Adam(model.parameters(), lr=1e-2)
data = [(torch.randn(8, 8), torch.randint(0, 3, (8,))) for _ in range(20)]
report = Report()
for x, y in data:
    out = model(x)
    loss = nn.functional.cross_entropy(out.logits, y) + 1e-3 * out.hidden.pow(2).mean()
    loss.backward()
    optimizer.step()
    optimizer.zero_grad()
    report.step(loss)
report.save()
