"""Pattern: a model whose forward returns a dict (logits and its own loss)."""

import torch
from corpus_report import Report
from torch import nn


class Net(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.body = nn.Sequential(nn.Linear(8, 32), nn.ReLU())
        self.head = nn.Linear(32, 3)

    def forward(self, x, labels=None):
        logits = self.head(self.body(x))
        out = {"logits": logits}
        if labels is not None:
            out["loss"] = nn.functional.cross_entropy(logits, labels)
        return out


torch.manual_seed(0)
model = Net()
optimizer = torch.optim.Adam(model.parameters(), lr=1e-2)
data = [(torch.randn(8, 8), torch.randint(0, 3, (8,))) for _ in range(20)]
report = Report()
for x, y in data:
    loss = model(x, labels=y)["loss"]
    loss.backward()
    optimizer.step()
    optimizer.zero_grad()
    report.step(loss)
report.save()
