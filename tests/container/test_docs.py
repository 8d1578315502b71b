"""The examples in docs/runtime.md run, and docs/environment.md names every variable set."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from trcomp.config import TrainingCompilerConfig
from trcomp_container.backends import resolve_engine
from trcomp_container.devices import Devices
from trcomp_container.environment import build_environment
from trcomp_container.job import JobPaths

DOCS = Path(__file__).resolve().parents[2] / "docs"


@pytest.mark.slow
def test_runtime_example_runs_eager_outside_a_job(tmp_path):
    text = (DOCS / "runtime.md").read_text()
    (code,) = re.findall(r"```python\n(.*?)```", text, flags=re.S)
    env = {k: v for k, v in os.environ.items() if not k.startswith(("TRCOMP_", "SM_"))}
    env["SM_MODEL_DIR"] = str(tmp_path)
    done = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith("backend=None loss=")
    assert (tmp_path / "model.pt").exists()


def test_environment_doc_lists_every_variable_the_entrypoint_sets():
    documented = set(re.findall(r"`([A-Z][A-Z0-9_]+)`", (DOCS / "environment.md").read_text()))
    paths = JobPaths.under(Path("/opt/ml"))
    set_by_us: set[str] = set()
    engines: set[str | None] = set()
    # backend='xla' runs on torch-xla on CPU and on the jax engine with NVIDIA GPUs.
    cases = (
        ("inductor", Devices()),
        ("xla", Devices()),
        ("xla", Devices(gpus=2)),
        (None, Devices()),
    )
    for backend, devices in cases:
        config = TrainingCompilerConfig(
            backend=backend or "auto",
            debug=True,
            **(
                {
                    "inductor_options": {"max_autotune": True},
                    "mode": "max-autotune",
                    "fullgraph": True,
                    "dynamic": True,
                }
                if backend == "inductor"
                else {}
            ),
        )
        env = build_environment(
            config=config,
            backend=backend,
            engine=resolve_engine(config, backend, devices),
            devices=devices,
            paths=paths,
            base_env={},
            metrics_dir=Path("/m"),
            scratch_dir=Path("/s"),
        )
        set_by_us |= set(env)
        engines.add(resolve_engine(config, backend, devices))
    assert engines == {"inductor", "torch_xla", "jax", None}
    assert set_by_us - documented == set()
