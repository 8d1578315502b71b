"""Pattern: a loss module with parameters (learned task weights), trained with the model."""

import torch
from corpus_report import Report
from torch import nn


class UncertaintyLoss(nn.Module):
    """Two task losses weighted by learned log-variances (Kendall et al.)."""

    def __init__(self) -> None:
        super().__init__()
        self.log_vars = nn.Parameter(torch.zeros(2))

    def forward(self, pred, target):
        losses = torch.stack(
            [
                nn.functional.mse_loss(pred[:, 0], target[:, 0]),
                nn.functional.l1_loss(pred[:, 1], target[:, 1]),
            ]
        )
        return (torch.exp(-self.log_vars) * losses + self.log_vars).sum()


torch.manual_seed(0)
model = nn.Sequential(nn.Linear(8, 32), nn.ReLU(), nn.Linear(32, 2))
criterion = UncertaintyLoss()
optimizer = torch.optim.Adam([*model.parameters(), *criterion.parameters()], lr=1e-2)
data = [(torch.randn(8, 8), torch.randn(8, 2)) for _ in range(20)]
report = Report()
for x, y in data:
    loss = criterion(model(x), y)
    loss.backward()
    optimizer.step()
    optimizer.zero_grad()
    report.step(loss)
report.check(log_vars=criterion.log_vars)
report.save()
