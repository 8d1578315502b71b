"""Run the real entrypoint (the toolkit's ``train``) against a temporary /opt/ml tree."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from tests.helpers import forkserver, vec_isa
from trcomp.local.tree import lay_out_tree

if TYPE_CHECKING:
    from trcomp import TrainingCompilerConfig

__all__ = [
    "SCRIPTS",
    "JobRun",
    "hyperparameters_for",
    "job_env",
    "lay_out",
    "run_job",
    "run_train",
    "train_command",
]

REPO = Path(__file__).resolve().parents[2]
# The container tests' job scripts (loop.py, ddp.py, probe_env.py...).
SCRIPTS = REPO / "tests" / "container" / "scripts"
# Variables of the developer's shell that would leak into the job.
_LEAKY_PREFIXES = ("TRCOMP_", "SM_", "SAGEMAKER_", "TORCHINDUCTOR_", "ACCELERATE_", "XLA_")
_LEAKY = {"PJRT_DEVICE", "USE_TORCH_XLA", "TORCH_LOGS", "RANK", "LOCAL_RANK", "WORLD_SIZE"}


@dataclass
class JobRun:
    """A finished job: its tree, exit code and output."""

    base: Path
    returncode: int
    output: str
    wall_s: float

    @property
    def summary(self) -> dict[str, Any]:
        return json.loads((self.base / "output/data/compiler/summary.json").read_text())

    @property
    def metrics(self) -> dict[str, float]:
        return dict(self.summary["metrics"])

    @property
    def failure(self) -> str | None:
        path = self.base / "output" / "failure"
        return path.read_text() if path.exists() else None

    def model_json(self, name: str) -> dict[str, Any]:
        return json.loads((self.base / "model" / name).read_text())


def hyperparameters_for(config: TrainingCompilerConfig | None) -> dict[str, Any]:
    """The config's hyperparameters, decoded once, as ``lay_out_tree`` takes them."""
    if config is None:
        return {}
    return {key: json.loads(value) for key, value in config.to_hyperparameters().items()}


def job_env(base: Path, extra: Mapping[str, str] | None = None) -> dict[str, str]:
    """A clean environment for ``train`` pointed at ``base``."""
    env = {
        key: value
        for key, value in os.environ.items()
        if not key.startswith(_LEAKY_PREFIXES) and key not in _LEAKY
    }
    env["PYTHONPATH"] = os.pathsep.join([str(REPO / "sdk"), str(REPO / "container")])
    env.update(
        SAGEMAKER_BASE_DIR=str(base),
        SAGEMAKER_TRAINING_MODULE="trcomp_container.training:main",
        TRCOMP_SIGTERM_GRACE_S="20",
        # One compile thread: no worker-pool start-up, measurably faster on a 2-core machine.
        TORCHINDUCTOR_COMPILE_THREADS="1",
    )
    # The session's one check of inductor's CPU vector ISA (tests/helpers/vec_isa.py).
    env.update(vec_isa.environment())
    env.update(extra or {})
    return env


def train_command() -> list[str]:
    """The toolkit's ``train`` console script next to this interpreter, else ``-m``."""
    train = Path(sys.executable).parent / "train"
    return [str(train)] if train.exists() else [sys.executable, "-m", "trcomp_container.training"]


def lay_out(
    base: Path,
    *,
    config: TrainingCompilerConfig | None,
    entry_point: str | None,
    hyperparameters: Mapping[str, Any] | None = None,
) -> Path:
    """Lay out the /opt/ml tree at ``base`` for the scripts in :data:`SCRIPTS`."""
    return lay_out_tree(
        base,
        hyperparameters={**hyperparameters_for(config), **(hyperparameters or {})},
        source_dir=SCRIPTS,
        entry_point=entry_point,
    )


def run_train(base: Path, *, env: Mapping[str, str] | None = None, timeout: float = 420) -> JobRun:
    """Run ``train`` on the tree at ``base`` and wait for it. Its training script is forked
    from a process that has imported torch when it can (tests/helpers/forkserver.py)."""
    started = time.monotonic()
    full = job_env(base, env)
    if full.get(forkserver.DIR_ENV):
        full.update(forkserver.environment(Path(full[forkserver.DIR_ENV])))
    done = subprocess.run(
        train_command(),
        env=full,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        timeout=timeout,
    )
    return JobRun(base, done.returncode, done.stdout, time.monotonic() - started)


def run_job(
    base: Path,
    *,
    config: TrainingCompilerConfig | None,
    entry_point: str | None,
    hyperparameters: Mapping[str, Any] | None = None,
    env: Mapping[str, str] | None = None,
    timeout: float = 420,
) -> JobRun:
    """Lay out a tree and run ``train`` on it."""
    lay_out(base, config=config, entry_point=entry_point, hyperparameters=hyperparameters)
    return run_train(base, env=env, timeout=timeout)
