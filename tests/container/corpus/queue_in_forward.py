"""Pattern: a MoCo-style queue of past keys, read and then overwritten in forward."""

import torch
from corpus_report import Report
from torch import nn


class Queued(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.encoder = nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Linear(16, 8))
        self.register_buffer("queue", torch.randn(32, 8))
        self.register_buffer("pointer", torch.zeros((), dtype=torch.long))

    def forward(self, x):
        q = nn.functional.normalize(self.encoder(x), dim=1)
        logits = q @ self.queue.clone().detach().t()  # as MoCo: the queue is no parameter
        with torch.no_grad():
            start = int(self.pointer)
            self.queue[start : start + x.shape[0]] = q.detach()
            self.pointer.fill_((start + x.shape[0]) % self.queue.shape[0])
        return logits


torch.manual_seed(0)
model = Queued()
opt = torch.optim.SGD(model.parameters(), lr=0.05)
report = Report()
for _ in range(16):
    logits = model(torch.randn(8, 8))
    loss = nn.functional.cross_entropy(logits, torch.zeros(8, dtype=torch.long))
    opt.zero_grad()
    loss.backward()
    opt.step()
    report.step(loss)
report.check(queue=model.queue.sum(dim=1))
report.save()
