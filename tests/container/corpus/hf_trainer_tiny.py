"""Pattern: an unmodified HF Trainer script (no trcomp import), tiny GPT-2, max_steps=20.

The per-step loss is read in an overridden compute_loss, the one place a Trainer
script sees each step's loss tensor; everything else is Trainer's own loop.
"""

import os
import tempfile

import torch
from corpus_report import Report
from transformers import GPT2Config, GPT2LMHeadModel, Trainer, TrainingArguments

report = Report()


class Tokens(torch.utils.data.Dataset):
    def __init__(self) -> None:
        self.ids = torch.randint(0, 64, (160, 16), generator=torch.Generator().manual_seed(0))

    def __len__(self) -> int:
        return len(self.ids)

    def __getitem__(self, index):
        return {"input_ids": self.ids[index], "labels": self.ids[index]}


class RecordingTrainer(Trainer):
    def compute_loss(self, model, inputs, return_outputs=False, **kwargs):
        loss = super().compute_loss(model, inputs, return_outputs=return_outputs, **kwargs)
        report.step(loss[0] if return_outputs else loss)
        return loss


torch.manual_seed(0)
config = GPT2Config(
    vocab_size=64, n_positions=16, n_embd=32, n_layer=2, n_head=2,
    resid_pdrop=0.0, embd_pdrop=0.0, attn_pdrop=0.0,
)  # fmt: skip
model = GPT2LMHeadModel(config)
args = TrainingArguments(
    output_dir=os.environ.get("SM_MODEL_DIR") or tempfile.mkdtemp(),
    max_steps=20,
    per_device_train_batch_size=8,
    learning_rate=1e-3,
    logging_steps=5,
    save_strategy="no",
    report_to=[],
    seed=0,
    dataloader_num_workers=0,
    use_cpu=True,
)
RecordingTrainer(model=model, args=args, train_dataset=Tokens()).train()
report.save()
