"""Under torchrun: rank 1 saves a file, then SIGKILLs itself, as the OOM killer would."""

from __future__ import annotations

import os
import signal
import time
from pathlib import Path

if os.environ["RANK"] == "1":
    Path(os.environ["SM_MODEL_DIR"], "rank1.txt").write_text("saved before the kill\n")
    os.kill(os.getpid(), signal.SIGKILL)
time.sleep(30)  # rank 0 waits; torchrun stops it when rank 1 dies
