"""Pattern: a model built with nn.LazyLinear (input sizes inferred on the first call)."""

import torch
from corpus_report import Report
from torch import nn

torch.manual_seed(0)
model = nn.Sequential(nn.LazyLinear(32), nn.ReLU(), nn.LazyLinear(1))
data = [(torch.randn(8, 8), torch.randn(8, 1)) for _ in range(20)]
model(data[0][0])  # the documented dry run: materialize the parameters before the optimizer
optimizer = torch.optim.SGD(model.parameters(), lr=0.05)
report = Report()
for x, y in data:
    loss = nn.functional.mse_loss(model(x), y)
    loss.backward()
    optimizer.step()
    optimizer.zero_grad()
    report.step(loss)
report.save()
