"""The loss wrappers of the reference workloads, as module-level classes.

Module-level on purpose: an ahead-of-time artifact (torch >= 2.14,
``trcomp_container.inprocess.aot``) refers to the model's classes by import path, so a class
defined inside a function cannot be saved, and the AOT rows would measure
the fallback. Imports torch: :mod:`trcomp_bench.workloads` imports this
module only when it builds a model.
"""

from __future__ import annotations

import torch
from torch import nn

__all__ = ["ClassifierLoss", "NextTokenLoss"]


class ClassifierLoss(nn.Module):
    """``model(x, y)`` returns the cross-entropy of ``body(x)`` against ``y``."""

    def __init__(self, body: nn.Module) -> None:
        super().__init__()
        self.body = body

    def forward(self, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        return nn.functional.cross_entropy(self.body(x), y)


class NextTokenLoss(nn.Module):
    """``model(tokens)`` returns the language model ``body``'s next-token cross-entropy."""

    def __init__(self, body: nn.Module, vocab: int) -> None:
        super().__init__()
        self.body = body
        self.vocab = vocab

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        logits = self.body(tokens[:, :-1])
        return nn.functional.cross_entropy(
            logits.reshape(-1, self.vocab), tokens[:, 1:].reshape(-1)
        )
