"""Pattern: a model whose forward returns a dataclass holding a dict (as HF ModelOutput-style
code does): logits, and extras with the hidden state and the model's own loss."""

from dataclasses import dataclass, field

import torch
from corpus_report import Report
from torch import nn


@dataclass
class Output:
    logits: torch.Tensor
    extras: dict[str, torch.Tensor] = field(default_factory=dict)


class Net(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.body = nn.Linear(8, 32)
        self.head = nn.Linear(32, 3)

    def forward(self, x, labels=None):
        hidden = torch.relu(self.body(x))
        out = Output(logits=self.head(hidden), extras={"hidden": hidden})
        if labels is not None:
            out.extras["loss"] = nn.functional.cross_entropy(out.logits, labels)
        return out


torch.manual_seed(0)
model = Net()
optimizer = torch.optim.Adam(model.parameters(), lr=1e-2)
data = [(torch.randn(8, 8), torch.randint(0, 3, (8,))) for _ in range(20)]
report = Report()
for x, y in data:
    out = model(x, labels=y)
    loss = out.extras["loss"] + 1e-3 * out.extras["hidden"].pow(2).mean()
    loss.backward()
    optimizer.step()
    optimizer.zero_grad()
    report.step(loss)
report.save()
