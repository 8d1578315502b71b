"""Pattern: torch.func: gradients by grad_and_value over functional_call, then optimizer.step()."""

import torch
from corpus_report import Report
from torch import nn
from torch.func import functional_call, grad_and_value

torch.manual_seed(0)
model = nn.Sequential(nn.Linear(8, 32), nn.Tanh(), nn.Linear(32, 1))
params = dict(model.named_parameters())
optimizer = torch.optim.Adam(params.values(), lr=1e-2)
data = [(torch.randn(8, 8), torch.randn(8, 1)) for _ in range(20)]


def compute_loss(weights, x, y):
    return nn.functional.mse_loss(functional_call(model, weights, (x,)), y)


report = Report()
for x, y in data:
    detached = {name: p.detach() for name, p in params.items()}
    grads, loss = grad_and_value(compute_loss)(detached, x, y)
    for name, p in params.items():
        p.grad = grads[name]
    optimizer.step()
    optimizer.zero_grad()
    report.step(loss)
report.save()
