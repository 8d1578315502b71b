"""Pattern: mixed precision on CPU, the forward under torch.autocast(bfloat16)."""

import torch
from corpus_report import Report
from torch import nn

torch.manual_seed(0)
model = nn.Sequential(nn.Linear(16, 32), nn.GELU(), nn.LayerNorm(32), nn.Linear(32, 4))
optimizer = torch.optim.AdamW(model.parameters(), lr=1e-2)
data = [(torch.randn(8, 16), torch.randint(0, 4, (8,))) for _ in range(20)]
report = Report()
for x, y in data:
    with torch.autocast("cpu", dtype=torch.bfloat16):
        logits = model(x)
        loss = nn.functional.cross_entropy(logits, y)
    loss.backward()
    optimizer.step()
    optimizer.zero_grad()
    report.step(loss)
report.save()
