"""Pattern: a baseline validation pass (eval() + no_grad) before training starts."""

import torch
from corpus_report import Report
from torch import nn

torch.manual_seed(0)
model = nn.Sequential(nn.Linear(8, 32), nn.ReLU(), nn.Linear(32, 1))
optimizer = torch.optim.SGD(model.parameters(), lr=0.05)
data = [(torch.randn(8, 8), torch.randn(8, 1)) for _ in range(20)]
held_out = (torch.randn(8, 8), torch.randn(8, 1))
report = Report()
model.eval()
with torch.no_grad():
    report.check(baseline=nn.functional.mse_loss(model(held_out[0]), held_out[1]))
model.train()
for x, y in data:
    loss = nn.functional.mse_loss(model(x), y)
    loss.backward()
    optimizer.step()
    optimizer.zero_grad()
    report.step(loss)
report.save()
