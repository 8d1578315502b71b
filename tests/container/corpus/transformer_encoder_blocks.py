"""Pattern: repeated nn.TransformerEncoderLayer blocks in a ModuleList (a tiny token classifier)."""

import torch
from corpus_report import Report
from torch import nn


class Encoder(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.embed = nn.Embedding(64, 32)
        self.layers = nn.ModuleList(
            nn.TransformerEncoderLayer(32, 2, dim_feedforward=32, dropout=0.0, batch_first=True)
            for _ in range(2)
        )
        self.head = nn.Linear(32, 4)

    def forward(self, ids):
        x = self.embed(ids)
        for layer in self.layers:
            x = layer(x)
        return self.head(x)


torch.manual_seed(0)
model = Encoder()
optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)
data = [(torch.randint(0, 64, (4, 12)), torch.randint(0, 4, (4, 12))) for _ in range(20)]
report = Report()
for ids, labels in data:
    loss = nn.functional.cross_entropy(model(ids).flatten(0, 1), labels.flatten())
    loss.backward()
    optimizer.step()
    optimizer.zero_grad()
    report.step(loss)
report.save()
