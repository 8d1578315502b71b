"""Process mode: the real toolkit and entrypoint in a subprocess, no Docker."""

from __future__ import annotations

import json
import tarfile
from pathlib import Path

import pytest
from sagemaker.exceptions import UnexpectedStatusException

from trcomp import LocalModeError, PyTorch, TrainingCompilerConfig
from trcomp.local.process import plan_process_job

SCRIPT = """
import argparse, os, pathlib
parser = argparse.ArgumentParser()
parser.add_argument("--greeting")
parser.add_argument("--fail", default="no")
args = parser.parse_args()
data = pathlib.Path(os.environ["SM_CHANNEL_TRAIN"], "x.txt").read_text()
pathlib.Path(os.environ["SM_MODEL_DIR"], "model.txt").write_text(args.greeting + data)
if args.fail == "yes":
    raise RuntimeError("the data is bad: fix row 7")
"""


@pytest.fixture
def project(tmp_path: Path) -> Path:
    (tmp_path / "src").mkdir()
    (tmp_path / "src" / "train.py").write_text(SCRIPT)
    (tmp_path / "data").mkdir()
    (tmp_path / "data" / "x.txt").write_text(" world")
    return tmp_path


def estimator(project: Path, role: str, **kwargs) -> PyTorch:
    return PyTorch(
        entry_point="train.py",
        source_dir=str(project / "src"),
        role=role,
        instance_type="local_process",
        instance_count=kwargs.pop("instance_count", 1),
        output_path=f"file://{project / 'out'}",
        compiler_config=TrainingCompilerConfig(enabled=False),
        **kwargs,
    )


@pytest.mark.slow
def test_process_mode_runs_the_job(project: Path, role: str) -> None:
    est = estimator(project, role, hyperparameters={"greeting": "hello; rm -rf /"})
    est.fit({"train": f"file://{project / 'data'}"})
    assert est.model_data == f"file://{project / 'out' / 'model.tar.gz'}"
    with tarfile.open(project / "out" / "model.tar.gz") as tar:
        assert tar.extractfile("model.txt").read() == b"hello; rm -rf / world"  # type: ignore[union-attr]
    with tarfile.open(project / "out" / "output.tar.gz") as tar:
        summary = json.load(tar.extractfile("data/compiler/summary.json"))  # type: ignore[arg-type]
    assert summary["outcome"] == "success"
    assert not list((project / "src").glob("__pycache__"))


@pytest.mark.slow
def test_failed_job_raises_with_reason_and_keeps_model(project: Path, role: str) -> None:
    est = estimator(project, role, hyperparameters={"greeting": "hi", "fail": "yes"})
    with pytest.raises(UnexpectedStatusException, match="the data is bad: fix row 7"):
        est.fit({"train": str(project / "data")})
    with tarfile.open(project / "out" / "model.tar.gz") as tar:
        assert tar.extractfile("model.txt").read() == b"hi world"  # type: ignore[union-attr]
    with tarfile.open(project / "out" / "output.tar.gz") as tar:
        assert "failure" in tar.getnames()


def test_plan_sets_the_same_tree_and_entrypoint(project: Path, role: str) -> None:
    est = estimator(project, role, hyperparameters={"greeting": "x"})
    job, tree = plan_process_job(est, {"train": f"file://{project / 'data'}"}, "job-1")
    assert job.env["SAGEMAKER_TRAINING_MODULE"] == "trcomp_container.training:main"
    assert job.env["SAGEMAKER_BASE_DIR"] == str(job.base_dir)
    assert tree["hyperparameters"]["greeting"] == '"x"'
    assert tree["hosts"] == ("localhost",)
    assert tree["channels"] == {"train": project / "data"}


@pytest.mark.parametrize(
    ("kwargs", "inputs", "message"),
    [
        ({}, {"train": "s3://bucket/x"}, "process mode reads and writes local files only"),
        ({}, {"train": "/does/not/exist"}, "does not exist"),
        ({"instance_count": 2}, None, "instance_type='local'"),
        ({"entry_point": "missing.py"}, None, "entry point .*missing.py' does not exist"),
    ],
)
def test_bad_process_jobs_fail_before_running(project, role, kwargs, inputs, message) -> None:
    entry = kwargs.pop("entry_point", None)
    est = estimator(project, role, **kwargs)
    if entry:
        est.entry_point = entry
    with pytest.raises(LocalModeError, match=message):
        est.fit(inputs)


def test_host_compiler_variables_do_not_leak_into_the_job(project, role, monkeypatch) -> None:
    # torch.compile in the calling process sets TORCHINDUCTOR_CACHE_DIR in os.environ;
    # the job must still keep its caches where the entrypoint puts them.
    monkeypatch.setenv("TORCHINDUCTOR_CACHE_DIR", "/tmp/torchinductor_host")
    monkeypatch.setenv("SM_MODEL_DIR", "/elsewhere")
    monkeypatch.setenv("MY_SETTING", "kept")
    est = estimator(project, role, environment={"XLA_FLAGS": "--xla_cpu_x=1"})
    job, _ = plan_process_job(est, None, "job-2")
    assert "TORCHINDUCTOR_CACHE_DIR" not in job.env and "SM_MODEL_DIR" not in job.env
    assert job.env["MY_SETTING"] == "kept"
    assert job.env["XLA_FLAGS"] == "--xla_cpu_x=1"
