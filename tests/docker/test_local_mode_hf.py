"""An unmodified HF Trainer script as a trcomp.HuggingFace job in Docker local mode."""

from __future__ import annotations

import json
import shutil
import tarfile
from pathlib import Path

import pytest

pytestmark = pytest.mark.container

HF_SCRIPT = Path(__file__).parents[1] / "container" / "scripts" / "hf_trainer.py"
# Records what the job's container gives it, then runs the Trainer script unchanged.
ENTRY = """
import os, runpy
stat = os.statvfs("/dev/shm")
os.makedirs(os.environ["SM_MODEL_DIR"], exist_ok=True)
with open(os.path.join(os.environ["SM_MODEL_DIR"], "shm_bytes"), "w") as f:
    f.write(str(stat.f_frsize * stat.f_blocks))
runpy.run_path(os.path.join(os.path.dirname(__file__), "hf_trainer.py"), run_name="__main__")
"""


def _members(tar_path: Path) -> dict[str, bytes]:
    with tarfile.open(tar_path) as tar:
        return {
            m.name.lstrip("./"): tar.extractfile(m).read()  # type: ignore[union-attr]
            for m in tar.getmembers()
            if m.isfile()
        }


def test_hf_trainer_job_runs_compiled_in_docker_local_mode(
    image: str, tmp_path: Path, role: str, quiet_aws: None
) -> None:
    import trcomp

    source = tmp_path / "code"
    source.mkdir()
    shutil.copy(HF_SCRIPT, source / "hf_trainer.py")
    (source / "entry.py").write_text(ENTRY)
    output = tmp_path / "output"
    output.mkdir()
    estimator = trcomp.HuggingFace(
        entry_point="entry.py",
        source_dir=str(source),
        role=role,
        instance_type="local",
        instance_count=1,
        output_path=f"file://{output}",
        hyperparameters={"max-steps": 4},
        compiler_config=trcomp.TrainingCompilerConfig(),
    )
    estimator.fit()

    # The job's own folder, <output_path>/<job name>/output (see local-mode.md).
    artifacts = Path(str(estimator.model_data).removeprefix("file://")).parent
    assert artifacts.parent.parent == output
    model = _members(artifacts / "model.tar.gz")
    result = json.loads(model["result.json"])
    assert result["compiled"] == "OptimizedModule"  # ACCELERATE_DYNAMO_BACKEND did it
    assert result["device"] == "cpu"  # not the XLA device: USE_TORCH_XLA=0
    assert int(model["shm_bytes"]) > 64 * 2**20  # more than Docker's default /dev/shm
    summary = json.loads(_members(artifacts / "output.tar.gz")["data/compiler/summary.json"])
    assert summary["backend"] == "inductor"
    assert summary["metrics"]["graphs_compiled"] >= 1
    assert summary["versions"]["transformers"] >= "4.57"
