"""Pattern: nn.DataParallel around the model on a host with no GPU (one device, CPU)."""

import torch
from corpus_report import Report
from torch import nn

torch.manual_seed(0)
model = nn.DataParallel(nn.Sequential(nn.Linear(8, 32), nn.ReLU(), nn.Linear(32, 1)))
optimizer = torch.optim.SGD(model.parameters(), lr=0.05)
data = [(torch.randn(8, 8), torch.randn(8, 1)) for _ in range(20)]
report = Report()
for x, y in data:
    loss = nn.functional.mse_loss(model(x), y)
    loss.backward()
    optimizer.step()
    optimizer.zero_grad()
    report.step(loss)
report.save()
