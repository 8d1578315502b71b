"""A tiny regression job for the Docker tests: plain PyTorch with trcomp.runtime.

Reads numbers from the ``training`` channel, fits y = 3x + 1, saves the model.
``--fail-with MSG`` raises instead; ``--sleep S`` waits first (Ctrl-C tests);
``--write-files`` leaves files in the code dir and the channel, as scripts do.
"""

from __future__ import annotations

import argparse
import json
import os
import socket
import time
from pathlib import Path

import torch

from trcomp import runtime

START = time.time()


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--steps", type=int, default=20)
    parser.add_argument("--fail-with", default="")
    parser.add_argument("--sleep", type=float, default=0.0)
    parser.add_argument("--write-files", action="store_true")
    args, _ = parser.parse_known_args()
    if args.sleep:
        time.sleep(args.sleep)
    if args.fail_with:
        raise ValueError(args.fail_with)

    channel = Path(os.environ["SM_CHANNEL_TRAINING"])
    x = torch.tensor([float(v) for v in (channel / "numbers.txt").read_text().split()]) / 64
    x = x.reshape(-1, 1)
    y = 3 * x + 1
    torch.manual_seed(0)
    model: torch.nn.Module = torch.nn.Sequential(
        torch.nn.Linear(1, 8), torch.nn.Tanh(), torch.nn.Linear(8, 1)
    )
    model = runtime.compile(model)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    loss = torch.tensor(0.0)
    for _ in range(args.steps):
        loss = torch.nn.functional.mse_loss(model(x), y)
        loss.backward()
        runtime.optimizer_step(optimizer)
        optimizer.zero_grad()
    print(f"on {socket.gethostname()}: loss {loss.item():.4f}", flush=True)

    if args.write_files:
        Path("written-by-job.txt").write_text("from the container\n")
        (channel / "written-by-job.txt").write_text("from the container\n")
    model_dir = Path(os.environ["SM_MODEL_DIR"])
    runtime.save(model.state_dict(), model_dir / "model.pt")
    info = {
        "hosts": json.loads(os.environ["SM_HOSTS"]),
        "backend": runtime.backend(),
        "loss": loss.item(),
    }
    (model_dir / "info.json").write_text(json.dumps(info))
    print(f"script_seconds={time.time() - START:.3f}", flush=True)


if __name__ == "__main__":
    main()
