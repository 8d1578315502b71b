"""Pattern: a small CNN with BatchNorm (running statistics updated in the forward)."""

import torch
from corpus_report import Report
from torch import nn

torch.manual_seed(0)
model = nn.Sequential(
    nn.Conv2d(1, 8, 3, padding=1),
    nn.BatchNorm2d(8),
    nn.ReLU(),
    nn.MaxPool2d(2),
    nn.Conv2d(8, 16, 3, padding=1),
    nn.BatchNorm2d(16),
    nn.ReLU(),
    nn.AdaptiveAvgPool2d(1),
    nn.Flatten(),
    nn.Linear(16, 4),
)
optimizer = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
data = [(torch.randn(8, 1, 8, 8), torch.randint(0, 4, (8,))) for _ in range(20)]
report = Report()
for x, y in data:
    loss = nn.functional.cross_entropy(model(x), y)
    loss.backward()
    optimizer.step()
    optimizer.zero_grad()
    report.step(loss)
report.check(running_mean=model[1].running_mean, running_var=model[5].running_var)
report.save()
