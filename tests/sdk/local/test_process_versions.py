"""Process mode on the torch version the job asks for (trcomp.local.interpreter).

The refusals run the real planner on a real estimator and check that nothing
was created; the 2.14 job runs a corpus script (no trcomp import) on the 2.14
environment made by `make install-214`, through TRCOMP_PROCESS_PYTHON_2_14.
"""

from __future__ import annotations

import importlib.metadata
import json
import sys
import tarfile
from pathlib import Path
from typing import Any

import pytest

from trcomp import LocalModeError, PyTorch, TrainingCompilerConfig
from trcomp.image.uris import IMAGES
from trcomp.local.interpreter import env_var_for, job_python
from trcomp.local.process import plan_process_job

REPO = Path(__file__).resolve().parents[3]
CORPUS = REPO / "tests" / "container" / "corpus"
NEW = next(image for image in IMAGES if image.torch.startswith("2.14."))
VAR = env_var_for(NEW.torch)
VENV_214 = REPO / ".venv-214"
# `make install-214` stamps the environment once it is complete (CI waits for it).
PYTHON_214 = VENV_214 / "bin/python" if (VENV_214 / ".installed").exists() else None
HERE = importlib.metadata.version("torch").split("+")[0]


def estimator(tmp_path: Path, role: str, **kwargs) -> PyTorch:
    return PyTorch(
        entry_point="mlp_loop.py",
        source_dir=str(CORPUS),
        role=role,
        instance_type="local_process",
        instance_count=1,
        output_path=f"file://{tmp_path / 'out'}",
        **kwargs,
    )


def test_var_names() -> None:
    assert env_var_for(NEW.torch) == env_var_for("2.14") == "TRCOMP_PROCESS_PYTHON_2_14"


@pytest.mark.skipif(NEW.torch == HERE, reason="this Python already has torch 2.14")
def test_a_torch_that_is_not_installed_is_refused_with_the_command(
    tmp_path: Path, role: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv(VAR, raising=False)
    est = estimator(tmp_path, role, framework_version="2.14")
    with pytest.raises(LocalModeError) as caught:
        plan_process_job(est.job_spec(), est)
    message = str(caught.value)
    assert f"torch {NEW.torch}" in message and f"has torch {HERE}" in message
    assert "make install-214" in message and f"{VAR}=.venv-214/bin/python" in message
    assert f"torch=={NEW.torch}" in message
    assert not (tmp_path / "out").exists()  # refused before the job dir is made


def test_a_variable_naming_another_torch_is_refused(
    tmp_path: Path, role: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    if NEW.torch == HERE:
        pytest.skip("this Python has torch 2.14: it would be used")
    monkeypatch.setenv(VAR, sys.executable)  # a Python with torch 2.9
    est = estimator(tmp_path, role, framework_version="2.14")
    with pytest.raises(LocalModeError) as caught:
        plan_process_job(est.job_spec(), est)
    message = str(caught.value)
    assert f"{VAR}={sys.executable!r} has torch {importlib.metadata.version('torch')}" in message
    assert f"asks for torch {NEW.torch}" in message and "make install-214" in message
    assert not (tmp_path / "out").exists()
    monkeypatch.setenv(VAR, str(tmp_path / "no-python"))
    with pytest.raises(LocalModeError, match="does not exist"):
        job_python("2.14")


def test_this_python_runs_its_own_version(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(env_var_for(HERE), "/nonexistent/python")  # not even read
    assert job_python(HERE) == sys.executable


def _run(
    tmp_path: Path, role: str, name: str, config: TrainingCompilerConfig, **kwargs: Any
) -> dict:
    est = estimator(
        tmp_path,
        role,
        framework_version="2.14",
        compiler_config=config,
        # One compile thread: no worker-pool start-up on a 2-core machine.
        environment={"TORCHINDUCTOR_COMPILE_THREADS": "1"},
        **kwargs,
    )
    est.fit(job_name=name)
    out = tmp_path / "out" / name / "output"
    with tarfile.open(out / "model.tar.gz") as tar:
        report = json.load(tar.extractfile("corpus.json"))  # type: ignore[arg-type]
    with tarfile.open(out / "output.tar.gz") as tar:
        summary = json.load(tar.extractfile("data/compiler/summary.json"))  # type: ignore[arg-type]
    return {"report": report, "summary": summary}


@pytest.mark.slow
@pytest.mark.skipif(PYTHON_214 is None, reason=f"no {VENV_214}: run `make install-214`")
def test_a_plain_loop_trains_compiled_on_2_14_as_eager_and_warm_starts_from_aot(
    tmp_path: Path, role: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Three 2.14 jobs: compiled (saves its AOT artifact to a shared cache), eager, and a
    second compiled job with another checkpoint location that loads the artifact."""
    monkeypatch.setenv(VAR, str(PYTHON_214))
    shared = tmp_path / "shared"
    shared.mkdir(mode=0o700)

    def compiled_job(name: str) -> dict:
        config = TrainingCompilerConfig(shared_cache=f"file://{shared}", shared_cache_timeout_s=60)
        checkpoints = f"file://{tmp_path / name / 'checkpoints'}"
        return _run(tmp_path, role, name, config, checkpoint_s3_uri=checkpoints)

    compiled = compiled_job("on-214")
    eager = _run(tmp_path, role, "off-214", TrainingCompilerConfig(enabled=False))
    summary = compiled["summary"]
    assert summary["outcome"] == "success"
    assert summary["versions"]["torch"].split("+")[0] == NEW.torch
    assert summary["backend"] == "inductor"
    assert summary["metrics"]["graphs_compiled"] >= 1
    assert summary["warm_start"] == "cold"
    (module,) = summary["ranks"][0]["autocompile"]["modules"]
    assert module["aot"]["path"] == "saved", module["aot"]
    assert any(flag == [True] for flag in compiled["report"]["compiled"])
    assert eager["summary"]["versions"]["torch"].split("+")[0] == NEW.torch
    ours, theirs = compiled["report"]["losses"], eager["report"]["losses"]
    assert len(ours) == len(theirs) == 20
    assert max(abs(a[0] - b[0]) for a, b in zip(ours, theirs, strict=True)) < 1e-4

    # A fresh job, its own (empty) checkpoint location: only the shared cache is warm.
    warm = compiled_job("warm-214")
    summary = warm["summary"]
    assert summary["warm_start"] == "aot artifact", summary["compiled"]
    (module,) = summary["ranks"][0]["autocompile"]["modules"]
    assert module["aot"]["path"] == "loaded", module["aot"]
    assert module["aot"]["calls"] >= 4 and module["ran_compiled"] is True, module
    assert summary["compiled"].endswith("loaded from an ahead-of-time artifact); 1 graph")
    assert summary["metrics"]["graphs_compiled"] == 1  # the artifact: dynamo compiled none
    assert any(flag == [True] for flag in warm["report"]["compiled"])
    ours = warm["report"]["losses"]
    assert max(abs(a[0] - b[0]) for a, b in zip(ours, theirs, strict=True)) < 1e-4
