"""Pattern: a WGAN-GP critic: a gradient penalty taken with create_graph=True (double backward)."""

import torch
from corpus_report import Report
from torch import nn

torch.manual_seed(0)
critic = nn.Sequential(nn.Linear(8, 32), nn.Tanh(), nn.Linear(32, 1))
opt = torch.optim.Adam(critic.parameters(), lr=1e-3, betas=(0.5, 0.9))
report = Report()
for _ in range(16):
    real, fake = torch.randn(8, 8) + 1.0, torch.randn(8, 8)
    alpha = torch.rand(8, 1)
    point = (alpha * real + (1 - alpha) * fake).requires_grad_(True)
    (grad,) = torch.autograd.grad(critic(point).sum(), point, create_graph=True)
    penalty = (grad.norm(dim=1) - 1).pow(2).mean()
    loss = critic(fake).mean() - critic(real).mean() + 10 * penalty
    opt.zero_grad()
    loss.backward()
    opt.step()
    report.step(loss)
report.save()
