"""A user's own model for ``trcomp bench --model tests/bench/my_model.py:make``."""

from __future__ import annotations

from typing import Any


def make(batch_size: int) -> tuple[Any, Any]:
    """A linear regressor whose forward returns the loss, and its data."""
    import torch

    class Regressor(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.linear = torch.nn.Linear(8, 1)

        def forward(self, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
            return torch.nn.functional.mse_loss(self.linear(x).squeeze(-1), y)

    def batch(step: int) -> tuple[torch.Tensor, torch.Tensor]:
        gen = torch.Generator().manual_seed(step)
        x = torch.randn(batch_size, 8, generator=gen)
        return x, x.sum(dim=1)

    return Regressor(), batch
