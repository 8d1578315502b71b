"""Pattern: EMA copies of the model (copy.deepcopy, then a no_grad lerp after each step).

One copy made before training, one made at step 5 (an EMA that starts after a
warm-up); both are evaluated every step and their losses must not change.
"""

import copy

import torch
from corpus_report import Report
from torch import nn


@torch.no_grad()
def update(ema: nn.Module, model: nn.Module, decay: float = 0.9) -> None:
    for ema_param, param in zip(ema.parameters(), model.parameters(), strict=True):
        ema_param.lerp_(param, 1.0 - decay)


torch.manual_seed(0)
model = nn.Sequential(nn.Linear(8, 32), nn.ReLU(), nn.Linear(32, 1))
ema_early = copy.deepcopy(model).requires_grad_(False)
ema_late = None
optimizer = torch.optim.SGD(model.parameters(), lr=0.05)
data = [(torch.randn(8, 8), torch.randn(8, 1)) for _ in range(20)]
held_out = (torch.randn(8, 8), torch.randn(8, 1))
report = Report()
for step, (x, y) in enumerate(data, 1):
    loss = nn.functional.mse_loss(model(x), y)
    loss.backward()
    optimizer.step()
    optimizer.zero_grad()
    report.step(loss)
    if step == 5:
        ema_late = copy.deepcopy(model).requires_grad_(False)
    update(ema_early, model)
    if ema_late is not None:
        update(ema_late, model)
    with torch.no_grad():
        report.check(ema_early=nn.functional.mse_loss(ema_early(held_out[0]), held_out[1]))
        if ema_late is not None:
            report.check(ema_late=nn.functional.mse_loss(ema_late(held_out[0]), held_out[1]))
report.save()
