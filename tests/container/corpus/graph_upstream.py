"""Pattern: the script's own autograd graph around the model: forward hooks that collect
features for a perceptual loss, auxiliary losses appended to a list argument, and two
backwards through one graph with retain_graph=True (PCGrad). A check's backward must
never free or reach into that graph."""

import torch
from corpus_report import Report
from torch import nn


class Aux(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.encoder = nn.Sequential(nn.Linear(8, 32), nn.GELU())
        self.head = nn.Linear(32, 2)

    def forward(self, x, aux):
        h = self.encoder(x)
        aux.append(h.pow(2).mean())
        return self.head(h)


torch.manual_seed(0)
model = Aux()
features = []
model.encoder.register_forward_hook(lambda module, args, out: features.append(out))
opt = torch.optim.SGD(model.parameters(), lr=0.05)
report = Report()
for _ in range(14):
    features.clear()
    aux = []
    out = model(torch.randn(16, 8), aux)
    first = out[:, 0].pow(2).mean() + 0.1 * sum(aux)
    second = out[:, 1].abs().mean() + 0.1 * sum(f.abs().mean() for f in features)
    opt.zero_grad()
    first.backward(retain_graph=True)
    kept = [p.grad.clone() for p in model.parameters()]
    opt.zero_grad()
    second.backward()
    for param, grad in zip(model.parameters(), kept, strict=True):
        dot = (param.grad * grad).sum()
        if dot < 0:  # PCGrad: project away the conflicting part
            param.grad -= dot / grad.pow(2).sum().clamp_min(1e-12) * grad
        param.grad += grad
    opt.step()
    report.step(first, second)
    report.check(features=len(features), aux=len(aux))
report.save()
