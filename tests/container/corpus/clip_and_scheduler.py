"""Pattern: gradient clipping (clip_grad_norm_) and an LR scheduler (warm-up then cosine)."""

import math

import torch
from corpus_report import Report
from torch import nn

STEPS = 20
torch.manual_seed(0)
model = nn.Sequential(nn.Linear(8, 32), nn.ReLU(), nn.Linear(32, 1))
optimizer = torch.optim.AdamW(model.parameters(), lr=2e-2)
scheduler = torch.optim.lr_scheduler.LambdaLR(
    optimizer, lambda s: min(1.0, (s + 1) / 4) * 0.5 * (1 + math.cos(math.pi * s / STEPS))
)
data = [(torch.randn(8, 8), torch.randn(8, 1) * 4) for _ in range(STEPS)]
report = Report()
for x, y in data:
    loss = nn.functional.mse_loss(model(x), y)
    loss.backward()
    norm = nn.utils.clip_grad_norm_(model.parameters(), max_norm=0.5)
    optimizer.step()
    scheduler.step()
    optimizer.zero_grad()
    report.step(loss)
    report.check(grad_norm=norm, lr=scheduler.get_last_lr()[0])
report.save()
