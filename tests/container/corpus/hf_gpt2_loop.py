"""Pattern: Hugging Face GPT-2 from a tiny config, trained in a plain loop (use_cache=False)."""

import torch
from corpus_report import Report
from transformers import GPT2Config, GPT2LMHeadModel

torch.manual_seed(0)
config = GPT2Config(
    vocab_size=64,
    n_positions=16,
    n_embd=32,
    n_layer=2,
    n_head=2,
    resid_pdrop=0.0,
    embd_pdrop=0.0,
    attn_pdrop=0.0,
    use_cache=False,
)
model = GPT2LMHeadModel(config)
model.train()
optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)
data = [torch.randint(0, 64, (4, 16)) for _ in range(20)]
report = Report()
for ids in data:
    loss = model(input_ids=ids, labels=ids, use_cache=False).loss
    loss.backward()
    optimizer.step()
    optimizer.zero_grad()
    report.step(loss)
report.save()
