"""Pattern: variable sequence lengths, one batch per length (embedding, GRU, mean pool)."""

import torch
from corpus_report import Report
from torch import nn


class Classifier(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.embed = nn.Embedding(64, 16)
        self.rnn = nn.GRU(16, 16, batch_first=True)
        self.head = nn.Linear(16, 2)

    def forward(self, ids):
        out, _ = self.rnn(self.embed(ids))
        return self.head(out.mean(dim=1))


torch.manual_seed(0)
model = Classifier()
optimizer = torch.optim.Adam(model.parameters(), lr=1e-2)
lengths = [5, 9, 7, 12, 5, 16, 3, 9, 11, 6, 8, 14, 4, 10, 13, 7, 5, 15, 9, 6]
data = [(torch.randint(0, 64, (4, n)), torch.randint(0, 2, (4,))) for n in lengths]
report = Report()
for ids, labels in data:
    loss = nn.functional.cross_entropy(model(ids), labels)
    loss.backward()
    optimizer.step()
    optimizer.zero_grad()
    report.step(loss)
report.save()
