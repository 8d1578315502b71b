"""Pattern: dropout with a fixed seed and a shuffling DataLoader (its order draws from the
global generator, so compiled code must draw eager's random numbers)."""

import torch
from corpus_report import Report
from torch import nn
from torch.utils.data import DataLoader, TensorDataset

torch.manual_seed(0)
data = TensorDataset(torch.randn(64, 8), torch.randn(64, 1))
loader = DataLoader(data, batch_size=8, shuffle=True)
model = nn.Sequential(nn.Linear(8, 32), nn.ReLU(), nn.Dropout(0.2), nn.Linear(32, 1))
opt = torch.optim.SGD(model.parameters(), lr=0.05)
report = Report()
for _ in range(2):
    for x, y in loader:
        loss = (model(x) - y).pow(2).mean()
        opt.zero_grad()
        loss.backward()
        opt.step()
        report.step(loss)
report.check(generator_after=torch.rand(4))
report.save()
