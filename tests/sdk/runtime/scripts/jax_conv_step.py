"""A small CNN trained eagerly and with compile_step on the jax engine, step by step.

``python jax_conv_step.py MODEL STEPS [WORKAROUND,...]`` turns the named torchax
workarounds off and prints one JSON line: each step's loss both ways, the
largest difference of each parameter's gradient after step 1 (null where the
compiled step left the gradient unset), and the error if the compiled run failed.

Models: ``mixed`` (convolutions with padding, stride, dilation, groups and a
grouped transposed one, batch norm, ReLU, max, average and adaptive pooling,
flatten, linear), ``bench_cnn`` (the benchmark's tiny ``cnn`` workload, batch
32, learning rate 1e-3 as ``trcomp bench`` runs it) and ``conv_pool``
(conv-ReLU-max pool-flatten-linear).
"""

from __future__ import annotations

import json
import sys
from collections.abc import Callable
from typing import Any

import torch
from torch import nn


class Classifier(nn.Module):
    def __init__(self, body: nn.Module) -> None:
        super().__init__()
        self.body = body

    def forward(self, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        return nn.functional.cross_entropy(self.body(x), y)


def images(batch: int, pixels: int) -> Callable[[int], tuple[torch.Tensor, torch.Tensor]]:
    def make(step: int) -> tuple[torch.Tensor, torch.Tensor]:
        generator = torch.Generator().manual_seed(100 + step)
        x = torch.randn(batch, 3, pixels, pixels, generator=generator)
        return x, torch.randint(0, 10, (batch,), generator=generator)

    return make


def build(name: str) -> tuple[nn.Module, Callable[[int], Any], float]:
    torch.manual_seed(0)
    if name == "bench_cnn":
        from trcomp_bench.workloads import get_workload

        model, batch = get_workload("cnn").build(32, "tiny")
        return model, batch, 1e-3
    if name == "conv_pool":
        body = nn.Sequential(
            nn.Conv2d(3, 8, 3), nn.ReLU(), nn.MaxPool2d(2), nn.Flatten(), nn.Linear(8 * 7 * 7, 10)
        )
        return Classifier(body), images(8, 16), 1e-3
    body = nn.Sequential(
        nn.Conv2d(3, 8, 3, padding=1), nn.BatchNorm2d(8), nn.ReLU(), nn.MaxPool2d(2),
        nn.Conv2d(8, 8, 3, padding=2, dilation=2, groups=2), nn.ReLU(), nn.AvgPool2d(2),
        nn.ConvTranspose2d(8, 4, 2, stride=2, groups=2),
        nn.Conv2d(4, 8, 3, stride=2, padding=1), nn.ReLU(), nn.AdaptiveAvgPool2d(2),
        nn.Flatten(), nn.Linear(8 * 2 * 2, 10),
    )  # fmt: skip
    return Classifier(body), images(8, 16), 1e-2


def train(name: str, steps: int, wrap: Any, device: Any) -> tuple[list[float], dict[str, Any]]:
    model, batch, lr = build(name)
    model = model.to(device)
    optimizer = torch.optim.AdamW(model.parameters(), lr=lr, foreach=False)

    def step(x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        optimizer.zero_grad()
        loss = model(x, y)
        loss.backward()
        optimizer.step()
        return loss

    step = wrap(step)
    losses: list[float] = []
    grads: dict[str, Any] = {}
    for i in range(steps):
        x, y = batch(i)
        losses.append(float(step(x.to(device), y.to(device)).item()))
        if i == 0:  # a copy: the compiled step writes the next gradients into the same tensors
            grads = {
                n: None if p.grad is None else p.grad.detach().to("cpu").clone()
                for n, p in model.named_parameters()
            }
    return losses, grads


def main() -> None:
    name, steps = sys.argv[1], int(sys.argv[2])
    off = [w for w in sys.argv[3].split(",") if w] if len(sys.argv) > 3 else []
    eager, eager_grads = train(name, steps, lambda fn: fn, torch.device("cpu"))
    from trcomp.runtime import jax_engine

    for workaround in off:
        jax_engine.ENVIRONMENT_WORKAROUNDS[workaround] = lambda env: None
    result: dict[str, Any] = {"model": name, "off": off, "eager": eager, "error": None}
    try:
        compiled, grads = train(name, steps, jax_engine.compile_step, jax_engine.device())
        result["losses"] = compiled
        result["loss_diffs"] = [abs(a - b) for a, b in zip(eager, compiled, strict=True)]
        result["grad_diffs"] = {
            n: None if g is None else float((g - eager_grads[n]).abs().max().item())
            for n, g in grads.items()
        }
        result["grad_scale"] = max(float(g.abs().max()) for g in eager_grads.values())
    except Exception as exc:  # any failure of the engine is the result the test reads
        result["error"] = f"{type(exc).__name__}: {str(exc)[:300]}"
    print(json.dumps(result))


if __name__ == "__main__":
    main()
