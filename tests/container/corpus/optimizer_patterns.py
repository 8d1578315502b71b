"""Pattern: what a fine-tuning loop does around the model: param groups (no weight decay on
biases and norms, a faster head), gradient accumulation (2 micro-batches per step, loss
scaled), gradient clipping (clip_grad_norm_) and an LR scheduler (warm-up then cosine)."""

import math

import torch
from corpus_report import Report
from torch import nn

STEPS, ACCUMULATE = 20, 2
torch.manual_seed(0)
model = nn.Sequential(
    nn.Linear(8, 32), nn.LayerNorm(32), nn.ReLU(), nn.Linear(32, 32), nn.ReLU(), nn.Linear(32, 3)
)
head = model[5]
head_ids = {id(p) for p in head.parameters()}
decay = [p for p in model.parameters() if id(p) not in head_ids and p.ndim == 2]
no_decay = [p for p in model.parameters() if id(p) not in head_ids and p.ndim < 2]
optimizer = torch.optim.AdamW(
    [
        {"params": decay, "weight_decay": 0.1},
        {"params": no_decay, "weight_decay": 0.0},
        {"params": list(head.parameters()), "lr": 3e-2, "weight_decay": 0.0},
    ],
    lr=1e-2,
)
scheduler = torch.optim.lr_scheduler.LambdaLR(
    optimizer, lambda s: min(1.0, (s + 1) / 4) * 0.5 * (1 + math.cos(math.pi * s / STEPS))
)
data = [(torch.randn(4, 8), torch.randint(0, 3, (4,))) for _ in range(STEPS * ACCUMULATE)]
report = Report()
for index, (x, y) in enumerate(data):
    loss = nn.functional.cross_entropy(model(x), y) / ACCUMULATE
    loss.backward()
    report.step(loss)
    if (index + 1) % ACCUMULATE == 0:
        norm = nn.utils.clip_grad_norm_(model.parameters(), max_norm=0.5)
        optimizer.step()
        scheduler.step()
        optimizer.zero_grad(set_to_none=True)
        report.check(grad_norm=norm, lr=scheduler.get_last_lr()[0])
report.save()
