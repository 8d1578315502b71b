"""Pattern: a gradient-norm penalty (create_graph=True) that starts at step 6, after the
model was checked and runs compiled: torch's compiled backward cannot take that second
backward, so the step must get eager's gradients instead of failing."""

import torch
from corpus_report import Report
from torch import nn

torch.manual_seed(0)
model = nn.Sequential(nn.Linear(8, 32), nn.Tanh(), nn.Linear(32, 1))
opt = torch.optim.SGD(model.parameters(), lr=0.05)
report = Report()
for step in range(12):
    x = torch.randn(16, 8, requires_grad=True)
    loss = model(x).pow(2).mean()
    if step >= 5:
        (grad,) = torch.autograd.grad(loss, x, create_graph=True)
        loss = loss + grad.pow(2).sum()
    opt.zero_grad()
    loss.backward()
    opt.step()
    report.step(loss)
report.save()
