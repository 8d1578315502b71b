"""Pattern: LBFGS, whose step calls a closure that runs the model several times."""

import torch
from corpus_report import Report
from torch import nn

torch.manual_seed(0)
model = nn.Sequential(nn.Linear(4, 16), nn.Tanh(), nn.Linear(16, 1))
x, y = torch.randn(32, 4), torch.randn(32, 1)
opt = torch.optim.LBFGS(model.parameters(), lr=0.5, max_iter=4)
report = Report()


def closure():
    opt.zero_grad()
    loss = (model(x) - y).pow(2).mean()
    loss.backward()
    return loss


for _ in range(10):
    loss = opt.step(closure)
    report.step(float(loss))
report.check(final=float((model(x) - y).pow(2).mean()))
report.save()
