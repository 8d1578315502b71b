"""Save something, then fail the way --mode says: raise, SIGKILL itself, or exit 3."""

from __future__ import annotations

import argparse
import os
import signal
import sys
from pathlib import Path


def load_batch(index: int) -> None:
    raise ValueError(f"corrupt record {index} in shard train-00042")


parser = argparse.ArgumentParser()
parser.add_argument("--mode", choices=["raise", "kill", "exit"], required=True)
args = parser.parse_args()
model_dir = Path(os.environ["SM_MODEL_DIR"])
(model_dir / "partial.txt").write_text("saved before the failure\n")
if args.mode == "raise":
    load_batch(7)
elif args.mode == "kill":
    os.kill(os.getpid(), signal.SIGKILL)
else:
    print("giving up", file=sys.stderr)
    sys.exit(3)
