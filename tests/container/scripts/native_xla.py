"""A native torch-xla script: XLA device, parallel loader, xm.optimizer_step."""

from __future__ import annotations

import json
import os
from pathlib import Path

import torch
import torch_xla
import torch_xla.core.xla_model as xm
import torch_xla.distributed.parallel_loader as pl
from torch import nn

torch.manual_seed(0)
device = torch_xla.device()
data = torch.utils.data.TensorDataset(torch.randn(160, 16), torch.randint(0, 2, (160,)))
loader = torch.utils.data.DataLoader(data, batch_size=16)
model = nn.Sequential(nn.Linear(16, 32), nn.Tanh(), nn.Linear(32, 2)).to(device)
optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
loss_fn = nn.CrossEntropyLoss()
for x, y in pl.MpDeviceLoader(loader, device):
    optimizer.zero_grad()
    loss = loss_fn(model(x), y)
    loss.backward()
    xm.optimizer_step(optimizer)
model_dir = Path(os.environ["SM_MODEL_DIR"])
xm.save(model.state_dict(), str(model_dir / "model.pt"))
(model_dir / "result.json").write_text(
    json.dumps({"loss": float(loss.cpu()), "hw": xm.xla_device_hw(device)})
)
