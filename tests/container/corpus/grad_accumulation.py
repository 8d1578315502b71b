"""Pattern: gradient accumulation (4 micro-batches per optimizer step, loss scaled)."""

import torch
from corpus_report import Report
from torch import nn

ACCUMULATE = 4
torch.manual_seed(0)
model = nn.Sequential(nn.Linear(8, 32), nn.Tanh(), nn.Linear(32, 4))
optimizer = torch.optim.AdamW(model.parameters(), lr=1e-2)
data = [(torch.randn(4, 8), torch.randint(0, 4, (4,))) for _ in range(20 * ACCUMULATE)]
report = Report()
for index, (x, y) in enumerate(data):
    loss = nn.functional.cross_entropy(model(x), y) / ACCUMULATE
    loss.backward()
    report.step(loss)
    if (index + 1) % ACCUMULATE == 0:
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
report.save()
