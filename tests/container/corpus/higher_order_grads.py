"""Pattern: MAML-style meta-learning: an inner step's gradients kept in the graph (create_graph)."""

import torch
from corpus_report import Report
from torch import nn
from torch.func import functional_call

torch.manual_seed(0)
model = nn.Sequential(nn.Linear(4, 16), nn.Tanh(), nn.Linear(16, 1))
meta_opt = torch.optim.SGD(model.parameters(), lr=0.01)
report = Report()
for _ in range(16):
    x_in, y_in, x_out, y_out = (
        torch.randn(8, 4),
        torch.randn(8, 1),
        torch.randn(8, 4),
        torch.randn(8, 1),
    )
    inner_loss = (model(x_in) - y_in).pow(2).mean()
    names = [name for name, _ in model.named_parameters()]
    grads = torch.autograd.grad(inner_loss, list(model.parameters()), create_graph=True)
    fast = {n: p - 0.1 * g for n, p, g in zip(names, model.parameters(), grads, strict=True)}
    outer_loss = (functional_call(model, fast, (x_out,)) - y_out).pow(2).mean()
    meta_opt.zero_grad()
    outer_loss.backward()
    meta_opt.step()
    report.step(outer_loss)
report.save()
