"""Pattern: a GAN: generator and discriminator, two optimizers, D then G each step."""

import torch
from corpus_report import Report
from torch import nn

torch.manual_seed(0)
generator = nn.Sequential(nn.Linear(4, 32), nn.ReLU(), nn.Linear(32, 8))
discriminator = nn.Sequential(nn.Linear(8, 32), nn.LeakyReLU(0.2), nn.Linear(32, 1))
opt_g = torch.optim.Adam(generator.parameters(), lr=2e-3, betas=(0.5, 0.999))
opt_d = torch.optim.Adam(discriminator.parameters(), lr=2e-3, betas=(0.5, 0.999))
bce = nn.BCEWithLogitsLoss()
real_data = [torch.randn(8, 8) * 0.5 + 1.0 for _ in range(20)]
noise = [torch.randn(8, 4) for _ in range(20)]
ones, zeros = torch.ones(8, 1), torch.zeros(8, 1)
report = Report()
for real, z in zip(real_data, noise, strict=True):
    fake = generator(z)
    loss_d = bce(discriminator(real), ones) + bce(discriminator(fake.detach()), zeros)
    opt_d.zero_grad()
    loss_d.backward()
    opt_d.step()
    loss_g = bce(discriminator(fake), ones)
    opt_g.zero_grad()
    loss_g.backward()
    opt_g.step()
    report.step(loss_d, loss_g)
report.save()
