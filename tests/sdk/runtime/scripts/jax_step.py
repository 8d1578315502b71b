"""A tiny tied-weight LM trained eagerly and with compile_step on the jax engine.

``python jax_step.py [WORKAROUND]`` turns one torchax workaround off and prints
one JSON line: the largest per-step loss difference, whether the head and the
embedding are still one tensor, and the error if the compiled run failed.
"""

from __future__ import annotations

import json
import sys

import torch
from torch import nn

VOCAB, WIDTH, STEPS = 64, 32, 6


class TinyLM(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.embed = nn.Embedding(VOCAB, WIDTH)
        self.norm = nn.LayerNorm(WIDTH)
        self.mix = nn.Linear(WIDTH, WIDTH)
        self.head = nn.Linear(WIDTH, VOCAB, bias=False)
        self.head.weight = self.embed.weight
        nn.init.normal_(self.embed.weight, std=0.02)

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        hidden = self.norm(self.embed(tokens))
        hidden = hidden + torch.einsum("btd,de->bte", torch.tanh(self.mix(hidden)), self.mix.weight)
        return self.head(hidden[:, :-1])


def batches() -> list[torch.Tensor]:
    generator = torch.Generator().manual_seed(1)
    return [torch.randint(0, VOCAB, (4, 9), generator=generator) for _ in range(STEPS)]


def train(step_wrapper, device) -> tuple[list[float], nn.Module]:
    torch.manual_seed(0)
    model = TinyLM().to(device)
    optimizer = torch.optim.AdamW(model.parameters(), lr=0.05)
    scheduler = torch.optim.lr_scheduler.StepLR(optimizer, step_size=2, gamma=0.1)

    def step(tokens: torch.Tensor) -> torch.Tensor:
        optimizer.zero_grad()
        logits = model(tokens)
        loss = nn.functional.cross_entropy(logits.reshape(-1, VOCAB), tokens[:, 1:].reshape(-1))
        loss.backward()
        optimizer.step()
        scheduler.step()
        return loss

    step = step_wrapper(step)
    return [float(step(batch.to(device)).item()) for batch in batches()], model


def main() -> None:
    eager, _ = train(lambda fn: fn, torch.device("cpu"))
    from trcomp.runtime import jax_engine

    off = sys.argv[1] if len(sys.argv) > 1 else None
    for table in (jax_engine.ENVIRONMENT_WORKAROUNDS, jax_engine.OPTIMIZER_WORKAROUNDS):
        if off in table:
            table[off] = lambda *args: None
    result: dict[str, object] = {"off": off, "error": None, "diff": None, "tied": None}
    try:
        compiled, model = train(jax_engine.compile_step, jax_engine.device())
        result["diff"] = max(abs(a - b) for a, b in zip(eager, compiled, strict=True))
        result["tied"] = model.head.weight is model.embed.weight
        result["losses"] = compiled
        result["stats"] = jax_engine.STATS.as_dict()
    except Exception as exc:  # any failure of the engine is the result the test reads
        result["error"] = f"{type(exc).__name__}: {str(exc)[:300]}"
    result["eager"] = eager
    print(json.dumps(result))


if __name__ == "__main__":
    main()
