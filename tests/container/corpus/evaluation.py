"""Pattern: a baseline validation pass before training starts, then evaluation between
training steps every 5 steps (model.eval() + no_grad each time)."""

import torch
from corpus_report import Report
from torch import nn

torch.manual_seed(0)
model = nn.Sequential(nn.Linear(8, 32), nn.ReLU(), nn.Linear(32, 1))
optimizer = torch.optim.SGD(model.parameters(), lr=0.05)
data = [(torch.randn(8, 8), torch.randn(8, 1)) for _ in range(20)]
held_out = (torch.randn(8, 8), torch.randn(8, 1))
report = Report()


def evaluate() -> torch.Tensor:
    model.eval()
    with torch.no_grad():
        loss = nn.functional.mse_loss(model(held_out[0]), held_out[1])
    model.train()
    return loss


report.check(baseline=evaluate())
for step, (x, y) in enumerate(data, 1):
    loss = nn.functional.mse_loss(model(x), y)
    loss.backward()
    optimizer.step()
    optimizer.zero_grad()
    report.step(loss)
    if step % 5 == 0:
        report.check(eval_loss=evaluate())
report.save()
