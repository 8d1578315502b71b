"""The jax engine in the training image: pinned versions, and a compile_step job in local mode."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import tarfile
from pathlib import Path
from typing import Any

import pytest

pytestmark = pytest.mark.container

LOOP = Path(__file__).resolve().parents[1] / "container" / "scripts" / "jax_loop.py"
_VERSIONS = """
import json, importlib.metadata as md
import torch, jax, torchax
print(json.dumps({n: md.version(n) for n in ("torch", "jax", "jaxlib", "torchax")}))
"""


def test_image_holds_the_pinned_jax_set_and_torchax_imports(image: str) -> None:
    done = subprocess.run(
        ["docker", "run", "--rm", "--network", "none", image, "python3", "-c", _VERSIONS],
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    versions = json.loads(done.stdout.strip().splitlines()[-1])
    assert versions["torch"].split("+")[0] == "2.9.0"
    assert (versions["jax"], versions["jaxlib"], versions["torchax"]) == (
        "0.10.2",
        "0.10.2",
        "0.0.13",
    )


def _fit(tmp: Path, role: str, name: str) -> dict[str, Any]:
    import trcomp

    source = tmp / "code"
    if not source.exists():
        source.mkdir()
        shutil.copy2(LOOP, source / "jax_loop.py")
    output = tmp / name
    output.mkdir()
    estimator = trcomp.PyTorch(
        entry_point="jax_loop.py",
        source_dir=str(source),
        role=role,
        instance_type="local",
        instance_count=1,
        output_path=f"file://{output}",
        checkpoint_s3_uri=f"file://{tmp / 'checkpoints'}",
        compiler_config=trcomp.TrainingCompilerConfig(backend="xla", xla_engine="jax"),
        hyperparameters={"steps": 12},
    )
    estimator.fit()
    # <output_path>/<job name>/output/, as SageMaker lays out its artifacts.
    output = Path(str(estimator.model_data).removeprefix("file://")).parent
    with tarfile.open(output / "model.tar.gz") as tar:
        losses = json.load(tar.extractfile("losses.json"))  # type: ignore[arg-type]
    with tarfile.open(output / "output.tar.gz") as tar:
        summary = json.load(tar.extractfile("data/compiler/summary.json"))  # type: ignore[arg-type]
    return {"losses": losses, "summary": summary}


def test_compile_step_job_matches_eager_and_warms_its_cache(
    image: str, tmp_path: Path, role: str, quiet_aws: None
) -> None:
    cold = _fit(tmp_path, role, "cold")
    warm = _fit(tmp_path, role, "warm")
    eager_dir = tmp_path / "eager"
    subprocess.run(
        [sys.executable, str(LOOP), "--steps", "12", "--model-dir", str(eager_dir)],
        check=True,
        capture_output=True,
        env={"PATH": "/usr/bin:/bin"},
    )
    eager = json.loads((eager_dir / "losses.json").read_text())["losses"]
    for run in (cold, warm):
        assert run["losses"]["engine"] == "jax"
        assert max(abs(a - b) for a, b in zip(run["losses"]["losses"], eager, strict=True)) < 1e-4
        assert (run["summary"]["backend"], run["summary"]["engine"]) == ("xla", "jax")
    assert cold["summary"]["ranks"][0]["jax"]["programs_from_cache"] == 0
    assert warm["summary"]["ranks"][0]["jax"]["programs_from_cache"] == 2
    assert warm["summary"]["cache_warm"] is True
