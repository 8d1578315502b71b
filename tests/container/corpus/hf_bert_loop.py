"""Pattern: Hugging Face BERT from a tiny config (sequence classification) in a plain loop."""

import torch
from corpus_report import Report
from transformers import BertConfig, BertForSequenceClassification

torch.manual_seed(0)
config = BertConfig(
    vocab_size=64,
    hidden_size=32,
    num_hidden_layers=2,
    num_attention_heads=2,
    intermediate_size=32,
    max_position_embeddings=16,
    hidden_dropout_prob=0.0,
    attention_probs_dropout_prob=0.0,
    problem_type="single_label_classification",
    num_labels=2,
)
model = BertForSequenceClassification(config)
model.train()
optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)
data = [(torch.randint(0, 64, (4, 12)), torch.randint(0, 2, (4,))) for _ in range(20)]
report = Report()
for ids, labels in data:
    out = model(input_ids=ids, attention_mask=torch.ones_like(ids), labels=labels)
    out.loss.backward()
    optimizer.step()
    optimizer.zero_grad()
    report.step(out.loss)
report.save()
