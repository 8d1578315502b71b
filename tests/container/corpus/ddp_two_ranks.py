"""Pattern: DistributedDataParallel on two gloo ranks (torchrun), each rank its own batches.

# corpus: 2 ranks
"""

import torch
import torch.distributed as dist
from corpus_report import Report
from torch import nn

dist.init_process_group("gloo")
rank = dist.get_rank()
torch.manual_seed(0)
model = nn.parallel.DistributedDataParallel(
    nn.Sequential(nn.Linear(16, 32), nn.GELU(), nn.Linear(32, 32), nn.GELU(), nn.Linear(32, 1))
)
optimizer = torch.optim.AdamW(model.parameters(), lr=1e-2)
generator = torch.Generator().manual_seed(rank)
report = Report()
for _ in range(20):
    x, y = torch.randn(8, 16, generator=generator), torch.randn(8, 1, generator=generator)
    loss = nn.functional.mse_loss(model(x), y)
    loss.backward()
    optimizer.step()
    optimizer.zero_grad()
    report.step(loss)
weights = torch.cat([p.detach().flatten() for p in model.parameters()])
gathered = [torch.zeros_like(weights) for _ in range(dist.get_world_size())]
dist.all_gather(gathered, weights)
report.check(weights=weights[:32], ranks_apart=float((gathered[0] - gathered[1]).abs().max()))
if rank == 0:
    report.save()
dist.destroy_process_group()
