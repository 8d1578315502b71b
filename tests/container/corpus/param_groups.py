"""Pattern: multiple optimizer param groups (no weight decay on biases and norms, a faster head)."""

import torch
from corpus_report import Report
from torch import nn

torch.manual_seed(0)
model = nn.Sequential(
    nn.Linear(8, 32), nn.LayerNorm(32), nn.ReLU(), nn.Linear(32, 32), nn.ReLU(), nn.Linear(32, 3)
)
head = model[5]
head_ids = {id(p) for p in head.parameters()}
decay = [p for n, p in model.named_parameters() if id(p) not in head_ids and p.ndim == 2]
no_decay = [p for n, p in model.named_parameters() if id(p) not in head_ids and p.ndim < 2]
optimizer = torch.optim.AdamW(
    [
        {"params": decay, "weight_decay": 0.1},
        {"params": no_decay, "weight_decay": 0.0},
        {"params": list(head.parameters()), "lr": 3e-2, "weight_decay": 0.0},
    ],
    lr=1e-2,
)
data = [(torch.randn(8, 8), torch.randint(0, 3, (8,))) for _ in range(20)]
report = Report()
for x, y in data:
    loss = nn.functional.cross_entropy(model(x), y)
    loss.backward()
    optimizer.step()
    optimizer.zero_grad()
    report.step(loss)
report.save()
