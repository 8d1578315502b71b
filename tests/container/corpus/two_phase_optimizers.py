"""Pattern: two phases, two optimizers: a head-only warm-up (4 steps), then the full fine-tune."""

import torch
from corpus_report import Report
from torch import nn

torch.manual_seed(0)
body = nn.Sequential(nn.Linear(8, 32), nn.ReLU(), nn.Linear(32, 32), nn.ReLU())
model = nn.Sequential(body, nn.Linear(32, 3))
head = model[1]
data = [(torch.randn(8, 8), torch.randint(0, 3, (8,))) for _ in range(24)]
report = Report()

body.requires_grad_(False)
warmup = torch.optim.SGD(head.parameters(), lr=0.1)
for x, y in data[:4]:
    loss = nn.functional.cross_entropy(model(x), y)
    loss.backward()
    warmup.step()
    warmup.zero_grad()
    report.step(loss)

body.requires_grad_(True)
finetune = torch.optim.AdamW(model.parameters(), lr=1e-2)
for x, y in data[4:]:
    loss = nn.functional.cross_entropy(model(x), y)
    loss.backward()
    finetune.step()
    finetune.zero_grad()
    report.step(loss)
report.save()
