"""Pattern: gradient hooks that keep state (a count and the norms they saw, clipping each
gradient), and a parameter returned from forward (a temperature): after training the
hooks each ran once per backward and every parameter holds only the script's hooks."""

import torch
from corpus_report import Report
from torch import nn


class Tempered(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.body = nn.Sequential(nn.Linear(8, 32), nn.Tanh(), nn.Linear(32, 4))
        self.temperature = nn.Parameter(torch.ones(()))

    def forward(self, x):
        return self.body(x), self.temperature


torch.manual_seed(0)
model = Tempered()
norms = []


def clip(grad):
    norms.append(float(grad.norm()))
    return grad.clamp(-0.5, 0.5)


for param in model.body.parameters():
    param.register_hook(clip)
opt = torch.optim.SGD(model.parameters(), lr=0.05)
report = Report()
for _ in range(14):
    logits, temperature = model(torch.randn(16, 8))
    loss = nn.functional.cross_entropy(logits / temperature, torch.zeros(16, dtype=torch.long))
    opt.zero_grad()
    loss.backward()
    opt.step()
    report.step(loss)
hooks = [len(p._backward_hooks or {}) for p in model.parameters()]
report.check(norms=len(norms), hooks=sum(hooks), temperature=model.temperature)
report.save()
