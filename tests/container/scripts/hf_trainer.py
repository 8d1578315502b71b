"""An unmodified Hugging Face Trainer script: no trcomp import, no torch.compile.

A tiny randomly initialised BERT classifier on random tokens, so nothing is
downloaded. Under the trcomp container it gets compiled through Accelerate's
ACCELERATE_DYNAMO_* variables alone.
"""

from __future__ import annotations

import argparse
import json
import os
from pathlib import Path

import torch
from transformers import BertConfig, BertForSequenceClassification, Trainer, TrainingArguments


class RandomTokens(torch.utils.data.Dataset):
    def __init__(self, size: int, length: int, vocab: int) -> None:
        generator = torch.Generator().manual_seed(0)
        self.ids = torch.randint(0, vocab, (size, length), generator=generator)
        self.labels = (self.ids[:, 0] % 2).long()

    def __len__(self) -> int:
        return len(self.ids)

    def __getitem__(self, index: int) -> dict[str, torch.Tensor]:
        return {"input_ids": self.ids[index], "labels": self.labels[index]}


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--max-steps", type=int, default=6)
    parser.add_argument("--optim", default=TrainingArguments.optim)
    parser.add_argument("--model-dir", default=os.environ.get("SM_MODEL_DIR", "model"))
    args = parser.parse_args()

    torch.manual_seed(0)
    config = BertConfig(
        vocab_size=128,
        hidden_size=32,
        num_hidden_layers=1,
        num_attention_heads=2,
        intermediate_size=64,
        max_position_embeddings=32,
        hidden_dropout_prob=0.0,
        attention_probs_dropout_prob=0.0,
        # BERT sets problem_type on its first forward when it is None; that config change
        # fails a dynamo guard and recompiles the model once (trcomp reported recompiles=1).
        problem_type="single_label_classification",
    )
    model = BertForSequenceClassification(config)
    training_args = TrainingArguments(
        output_dir=str(Path(args.model_dir) / "trainer"),
        max_steps=args.max_steps,
        per_device_train_batch_size=8,
        learning_rate=1e-3,
        logging_steps=1,
        save_strategy="no",
        report_to=[],
        dataloader_num_workers=0,
        optim=args.optim,
    )
    trainer = Trainer(model=model, args=training_args, train_dataset=RandomTokens(64, 16, 128))
    result = trainer.train()
    Path(args.model_dir).mkdir(parents=True, exist_ok=True)
    (Path(args.model_dir) / "result.json").write_text(
        json.dumps(
            {
                "loss": result.training_loss,
                "compiled": type(trainer.model_wrapped).__name__,
                "device": str(trainer.args.device),
            }
        )
    )
    trainer.save_model(args.model_dir)


if __name__ == "__main__":
    main()
