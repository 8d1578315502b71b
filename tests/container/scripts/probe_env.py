"""Write what the script sees (argv, trcomp.runtime, compiler variables) to the model dir."""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

from trcomp import runtime

KEYS = (
    "TRCOMP_CONFIG",
    "TRCOMP_BACKEND",
    "USE_TORCH_XLA",
    "PJRT_DEVICE",
    "ACCELERATE_DYNAMO_BACKEND",
    "TORCHINDUCTOR_CACHE_DIR",
    "SM_MODEL_DIR",
    "SM_HPS",
)
model_dir = Path(os.environ["SM_MODEL_DIR"])
model_dir.mkdir(parents=True, exist_ok=True)
(model_dir / "seen.json").write_text(
    json.dumps(
        {
            "argv": sys.argv[1:],
            "backend": runtime.backend(),
            "enabled": runtime.is_enabled(),
            "env": {key: os.environ.get(key) for key in KEYS},
        }
    )
)
print("probe_env done")
