"""Pattern: tensors forward changes in place: the input batch normalised in place, an EMA
copy of the weights updated under no_grad, a step count and running statistics kept as
plain tensor attributes (not buffers), the count switching the model's behaviour at step 9."""

import torch
from corpus_report import Report
from torch import nn


class InPlace(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.body = nn.Sequential(nn.Linear(8, 32), nn.Tanh(), nn.Linear(32, 1))
        self.ema = nn.Linear(8, 32)
        self.ema.requires_grad_(False)
        self.step = torch.zeros(())
        self.mean = torch.zeros(8)

    def forward(self, x):
        x.sub_(x.mean(0)).div_(x.std(0) + 1e-5)
        with torch.no_grad():
            self.step += 1
            self.mean.mul_(0.9).add_(x.mean(0), alpha=0.1)
            for ema, live in zip(self.ema.parameters(), self.body[0].parameters(), strict=True):
                ema.mul_(0.9).add_(live, alpha=0.1)
        out = self.body(x + self.mean)
        teacher = torch.tanh(self.ema(x)).sum(1, keepdim=True)
        return out + 0.1 * teacher * (self.step > 8).float()


torch.manual_seed(0)
model = InPlace()
opt = torch.optim.SGD(model.parameters(), lr=0.05)
report = Report()
for _ in range(14):
    x = torch.randn(16, 8) * 3 + 1
    loss = model(x).pow(2).mean()
    opt.zero_grad()
    loss.backward()
    opt.step()
    report.step(loss)
    report.check(batch=x.abs().sum())  # the script reads its batch after the step
report.check(step=model.step, mean=model.mean, ema=model.ema.weight.sum())
report.save()
