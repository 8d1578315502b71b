"""Pattern: weight tying: the output projection shares the embedding's weight (a tiny LM)."""

import torch
from corpus_report import Report
from torch import nn


class TiedLM(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.embed = nn.Embedding(64, 32)
        self.mix = nn.Linear(32, 32)
        self.out = nn.Linear(32, 64, bias=False)
        self.out.weight = self.embed.weight

    def forward(self, ids):
        return self.out(torch.tanh(self.mix(self.embed(ids))))


torch.manual_seed(0)
model = TiedLM()
assert model.out.weight is model.embed.weight
optimizer = torch.optim.AdamW(model.parameters(), lr=1e-2)
data = [torch.randint(0, 64, (4, 9)) for _ in range(20)]
report = Report()
for ids in data:
    logits = model(ids[:, :-1])
    loss = nn.functional.cross_entropy(logits.flatten(0, 1), ids[:, 1:].flatten())
    loss.backward()
    optimizer.step()
    optimizer.zero_grad()
    report.step(loss)
assert model.out.weight is model.embed.weight
report.save()
