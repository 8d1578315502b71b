"""Train "forever"; on SIGTERM write a checkpoint and exit, as a well-behaved script does."""

from __future__ import annotations

import os
import signal
import sys
import time
from pathlib import Path

checkpoints = Path(
    os.environ.get("SM_CHECKPOINT_DIR", Path(os.environ["SM_MODEL_DIR"]).parent / "checkpoints")
)


def on_sigterm(signum: int, frame: object) -> None:
    time.sleep(0.5)  # checkpointing takes a moment; the entrypoint must wait for it
    (checkpoints / "on-sigterm.pt").write_text("checkpoint written after SIGTERM\n")
    sys.exit(0)


signal.signal(signal.SIGTERM, on_sigterm)
checkpoints.mkdir(parents=True, exist_ok=True)
(checkpoints / "step-1.pt").write_text("regular checkpoint\n")
(Path(os.environ["SM_MODEL_DIR"]) / "started").write_text("yes\n")
while True:
    time.sleep(0.05)
