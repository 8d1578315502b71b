"""Real v3 local container jobs in trcomp's image, compiler on: a plain loop and torchrun.

Marked ``container``: they need Docker and the image (``make image OFFLINE=1``;
``TRCOMP_LOCAL_IMAGE`` names another tag). Each job compiles with inductor on CPU.
"""

from __future__ import annotations

import json
import re
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip(
    "sagemaker.train.model_trainer", reason="needs the SageMaker SDK v3: run make test-v3"
)

from sagemaker.core.training.configs import Compute, SourceCode
from sagemaker.train.distributed import Torchrun
from sagemaker.train.model_trainer import Mode

from tests.helpers.aws import aws_error_server
from tests.helpers.records import compilations, read_records
from trcomp import TrainingCompilerConfig
from trcomp.image.uris import local_image_uri
from trcomp.v3 import ModelTrainer

REPO = Path(__file__).resolve().parents[2]
pytestmark = [pytest.mark.container, pytest.mark.slow]


@pytest.fixture(scope="module")
def image() -> str:
    """trcomp's local image; skip unless Docker answers and the image is built."""
    if shutil.which("docker") is None:
        pytest.skip("no docker CLI: run `make docker-engine`")
    tag = local_image_uri()
    found = subprocess.run(["docker", "image", "inspect", tag], capture_output=True, check=False)
    if found.returncode != 0:
        pytest.skip(f"image {tag} is not built (or no Docker engine): run `make image OFFLINE=1`")
    return tag


def _json(path: Path) -> dict[str, Any]:
    return dict(json.loads(path.read_text()))


def _containers_of(root: Path) -> list[str]:
    """Every container, running or exited, of the compose project v3 wrote into ``root``."""
    label = f"label=com.docker.compose.project.working_dir={root.resolve()}"
    found = subprocess.run(
        ["docker", "ps", "-aq", "--filter", label], capture_output=True, text=True, check=True
    )
    return found.stdout.split()


def test_the_docs_example_trains_a_plain_loop_compiled(image, tmp_path, monkeypatch) -> None:
    text = (REPO / "docs" / "v3.md").read_text()
    (code,) = re.findall(r"^```python\n(.*?)^```", text, flags=re.S | re.M)
    shutil.copytree(REPO / "docs" / "examples" / "v3", tmp_path / "docs" / "examples" / "v3")
    monkeypatch.chdir(tmp_path)
    # Any AWS call (v3's telemetry asks STS who we are) would land here.
    with aws_error_server() as aws:
        monkeypatch.setenv("AWS_ENDPOINT_URL", aws.url)
        exec(compile(code, "docs/v3.md", "exec"), {"__name__": "__doc_example__"})
    assert aws.received == []
    root = tmp_path / "v3-job"
    assert _containers_of(root) == []  # the job's compose containers were removed
    summary = _json(root / "artifacts/output/data/compiler/summary.json")
    assert summary["backend"] == "inductor" and summary["exit_code"] == 0
    metrics = summary["metrics"]
    assert metrics["graphs_compiled"] >= 1
    assert metrics["recompiles"] == 0 and summary["ranks"][0]["steps"] == 30
    # Counted, not timed: the compilations behind compile_time_s, and every step.
    (record,) = read_records(root / "artifacts/output")
    assert compilations(record) >= 1 and record["steps"] == 30
    assert _json(root / "artifacts/model/result.json")["backend"] == "inductor"
    assert (root / "compressed_artifacts" / "model.tar.gz").is_file()
    # The compile cache outlives the container, in the local checkpoint dir.
    cache = root / "trcomp-checkpoints" / "trcomp-cache"
    assert summary["cache_dir"] == f"{cache.parent.as_uri()}/trcomp-cache"
    assert any(p.is_file() for p in cache.rglob("*"))


def test_torchrun_on_two_processes(image, tmp_path, source_dir) -> None:
    root = tmp_path / "job"
    root.mkdir()
    trainer = ModelTrainer(
        training_mode=Mode.LOCAL_CONTAINER,
        source_code=SourceCode(source_dir=str(source_dir), entry_script="ddp.py"),
        compute=Compute(instance_type="local_cpu", instance_count=1),
        distributed=Torchrun(process_count_per_node=2),
        local_container_root=str(root),
        compiler_config=TrainingCompilerConfig(backend="inductor"),
    )
    trainer.train()
    assert _containers_of(root) == []  # the job's compose containers were removed
    summary = _json(root / "artifacts/output/data/compiler/summary.json")
    assert summary["backend"] == "inductor" and summary["exit_code"] == 0
    assert summary["distribution"] == "torch_distributed" and summary["nproc_per_node"] == 2
    assert summary["metrics"]["graphs_compiled"] >= 1 and len(summary["ranks"]) == 2
    ddp = _json(root / "artifacts/model/ddp.json")
    assert ddp == {"world": 2, "in_sync": True, "backend": "inductor"}
