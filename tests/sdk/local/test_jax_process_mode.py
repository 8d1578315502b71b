"""Done-when of the jax engine in process mode: a compile_step loop on CPU, end to end.

Three real jobs through the SDK, the toolkit and the entrypoint: compiler off,
jax engine cold, and jax engine again on the same checkpoint location (warm).
"""

from __future__ import annotations

import io
import json
import tarfile
from pathlib import Path

import pytest

from trcomp import PyTorch, TrainingCompilerConfig
from trcomp.contract.metrics import METRICS

pytest.importorskip("torchax")
pytestmark = pytest.mark.slow

SCRIPTS = Path(__file__).resolve().parents[2] / "container" / "scripts"
JAX = TrainingCompilerConfig(backend="xla", xla_engine="jax")


def _fit(tmp: Path, role: str, name: str, config: TrainingCompilerConfig) -> dict:
    out = tmp / name
    estimator = PyTorch(
        entry_point="jax_loop.py",
        source_dir=str(SCRIPTS),
        role=role,
        instance_type="local_process",
        instance_count=1,
        output_path=f"file://{out}",
        checkpoint_s3_uri=f"file://{tmp / 'checkpoints'}",
        compiler_config=config,
        hyperparameters={"steps": 12},
    )
    estimator.fit(wait=True, job_name=f"jax-{name}")
    # <output_path>/<job name>/output/, as SageMaker lays out its artifacts.
    out = out / f"jax-{name}" / "output"
    with tarfile.open(out / "model.tar.gz") as tar:
        losses = json.load(tar.extractfile("losses.json"))  # type: ignore[arg-type]
        weights = tar.extractfile("model.pt").read()  # type: ignore[union-attr]
    with tarfile.open(out / "output.tar.gz") as tar:
        summary = json.load(tar.extractfile("data/compiler/summary.json"))  # type: ignore[arg-type]
    return {"losses": losses, "summary": summary, "weights": weights}


@pytest.fixture(scope="module")
def runs(tmp_path_factory) -> dict[str, dict]:
    role = "arn:aws:iam::111122223333:role/SageMakerRole"
    tmp = tmp_path_factory.mktemp("jax-process")
    eager = _fit(tmp / "eager-tree", role, "eager", TrainingCompilerConfig(enabled=False))
    return {
        "eager": eager,
        "cold": _fit(tmp, role, "cold", JAX),
        "warm": _fit(tmp, role, "warm", JAX),
    }


def test_losses_match_the_compiler_off_job_step_by_step(runs) -> None:
    eager = runs["eager"]["losses"]["losses"]
    for name in ("cold", "warm"):
        result = runs[name]["losses"]
        assert result["engine"] == "jax"
        assert len(result["losses"]) == len(eager) == 12
        assert max(abs(a - b) for a, b in zip(result["losses"], eager, strict=True)) < 1e-4


def test_summary_reports_the_jax_engine_and_its_programs(runs) -> None:
    summary = runs["cold"]["summary"]
    assert (summary["backend"], summary["engine"]) == ("xla", "jax")
    assert "torchax" in summary["versions"] and summary["versions"]["jax"] == "0.10.2"
    metrics = summary["metrics"]
    assert metrics["graphs_compiled"] == 2 and metrics["recompiles"] == 0
    # Counters, not clocks: the programs whose building compile_time_s adds up, one
    # compiled call per step, and the steps behind the step times; every metric reported.
    # No speed-up over eager: the jax engine cannot run the model eager in the same process.
    assert set(metrics) == set(METRICS) - {"eager_step_s", "speedup_vs_eager"}
    assert "jax engine" in summary["speedup"]["reason"]
    (rank,) = summary["ranks"]
    assert rank["jax"]["programs_compiled"] == 2 and rank["jax"]["calls"] == 12
    assert rank["steps"] == 12
    assert runs["eager"]["summary"]["engine"] is None


def test_second_job_on_the_same_checkpoints_reads_the_jax_cache(runs) -> None:
    cold = runs["cold"]["summary"]
    warm = runs["warm"]["summary"]
    assert cold["cache_warm"] is False and warm["cache_warm"] is True
    assert cold["ranks"][0]["jax"]["programs_from_cache"] == 0
    assert warm["ranks"][0]["jax"]["programs_from_cache"] == 2
    assert warm["ranks"][0]["jax"]["programs_compiled"] == 2


def test_saved_weights_load_without_jax(runs) -> None:
    import torch

    state = torch.load(io.BytesIO(runs["cold"]["weights"]), weights_only=True)
    assert {type(value) for value in state.values()} == {torch.Tensor}
    assert state["head.weight"].device.type == "cpu"
