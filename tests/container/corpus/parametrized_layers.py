"""Pattern: layers under a parametrization (spectral norm on a critic, as GANs do)."""

import torch
from corpus_report import Report
from torch import nn
from torch.nn.utils.parametrizations import spectral_norm

torch.manual_seed(0)
model = nn.Sequential(
    spectral_norm(nn.Linear(8, 32)), nn.LeakyReLU(0.2), spectral_norm(nn.Linear(32, 1))
)
opt = torch.optim.Adam(model.parameters(), lr=1e-3)
report = Report()
for _ in range(16):
    loss = (model(torch.randn(8, 8)) - 1).pow(2).mean()
    opt.zero_grad()
    loss.backward()
    opt.step()
    report.step(loss)
report.save()
