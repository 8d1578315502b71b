"""Process mode: the real toolkit and entrypoint in a subprocess, no Docker."""

from __future__ import annotations

import concurrent.futures
import contextlib
import json
import os
import subprocess
import sys
import tarfile
import tempfile
from collections.abc import Iterator
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
        output_path=kwargs.pop("output_path", f"file://{project / 'out'}"),
        compiler_config=TrainingCompilerConfig(enabled=False),
        **kwargs,
    )


@pytest.mark.slow
def test_process_mode_runs_the_job(project: Path, role: str) -> None:
    est = estimator(project, role, hyperparameters={"greeting": "hello; rm -rf /"})
    est.fit({"train": f"file://{project / 'data'}"}, job_name="greeting-job")
    # <output_path>/<job name>/output/, as SageMaker lays out its artifacts.
    out = project / "out" / "greeting-job" / "output"
    assert est.model_data == f"file://{out / 'model.tar.gz'}"
    with tarfile.open(out / "model.tar.gz") as tar:
        assert tar.extractfile("model.txt").read() == b"hello; rm -rf / world"  # type: ignore[union-attr]
    with tarfile.open(out / "output.tar.gz") as tar:
        summary = json.load(tar.extractfile("data/compiler/summary.json"))  # type: ignore[arg-type]
    assert summary["outcome"] == "success"
    assert not list((project / "src").glob("__pycache__"))


@pytest.mark.slow
def test_failed_job_raises_with_reason_and_keeps_model(project: Path, role: str) -> None:
    est = estimator(project, role, hyperparameters={"greeting": "hi", "fail": "yes"})
    with pytest.raises(UnexpectedStatusException, match="the data is bad: fix row 7") as caught:
        est.fit({"train": str(project / "data")}, job_name="failing-job")
    assert caught.value.exit_code == 1  # type: ignore[attr-defined]
    assert "exit code 1" in str(caught.value)
    out = project / "out" / "failing-job" / "output"
    with tarfile.open(out / "model.tar.gz") as tar:
        assert tar.extractfile("model.txt").read() == b"hi world"  # type: ignore[union-attr]
    with tarfile.open(out / "output.tar.gz") as tar:
        assert "failure" in tar.getnames()


def test_plan_sets_the_same_tree_and_entrypoint(project: Path, role: str) -> None:
    est = estimator(project, role, hyperparameters={"greeting": "x"})
    job, tree = plan_process_job(
        est.job_spec(), est, {"train": f"file://{project / 'data'}"}, "job-1"
    )
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
        ({"entry_point": "my train.py"}, None, "entry_point='my train.py' cannot be run.*' '"),
        ({"entry_point": "t;rm.py"}, None, "entry_point='t;rm.py' cannot be run.*';'"),
        ({"job_name": "my job"}, None, "job_name 'my job' is not a valid SageMaker"),
        ({"job_name": "a" * 64}, None, "is not a valid SageMaker training job name"),
        ({"job_name": "a/b"}, None, "is not a valid SageMaker training job name"),
        ({"job_name": "-a"}, None, "is not a valid SageMaker training job name"),
        ({"checkpoint_s3_uri": "s3://bucket/ckpt"}, None, "reads and writes local files only"),
        ({"output_path": "FILE/out"}, None, "output_path .* is a file, not a directory"),
        ({"checkpoint_s3_uri": "FILE/ckpt"}, None, "checkpoint_s3_uri .* is a file, not a dir"),
    ],
)
def test_bad_process_jobs_fail_before_anything_is_created(
    project, role, kwargs, inputs, message, monkeypatch
) -> None:
    # Every temp dir the job would make goes here: it must stay empty.
    scratch = project / "tmp"
    scratch.mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(scratch))
    (project / "FILE").write_text("a file, not a directory")
    entry = kwargs.pop("entry_point", None)
    job_name = kwargs.pop("job_name", None)
    for key in ("output_path", "checkpoint_s3_uri"):
        if key in kwargs and kwargs[key].startswith("FILE"):
            kwargs[key] = f"file://{project / kwargs[key]}"
    est = estimator(project, role, **kwargs)
    if entry:
        if entry != "missing.py":  # the others exist: their names are the problem
            (project / "src" / entry).write_text("print('never runs')\n")
        est.entry_point = entry
    with pytest.raises(LocalModeError, match=message):
        est.fit(inputs, job_name=job_name)
    assert not list(scratch.iterdir())
    assert not (project / "out").exists()


@contextlib.contextmanager
def read_only_dir(path: Path) -> Iterator[Path]:
    """A directory this process cannot write into, root included.

    Root ignores permission bits, so as root the directory is made immutable
    (``chattr +i``: even root gets EPERM creating a file in it).
    """
    path.mkdir(mode=0o500)
    if os.geteuid() != 0:
        yield path
        return
    done = subprocess.run(["chattr", "+i", str(path)], capture_output=True, text=True)
    if done.returncode != 0:
        pytest.skip(f"root, and chattr +i failed on {path}: {done.stderr.strip()}")
    try:
        with pytest.raises(PermissionError):
            (path / "probe").touch()  # the test below means something only if this holds
        yield path
    finally:
        subprocess.run(["chattr", "-i", str(path)], check=True)


def test_read_only_output_path_is_refused_before_the_job(project, role) -> None:
    with read_only_dir(project / "locked") as locked:
        est = estimator(project, role, output_path=f"file://{locked / 'out'}")
        with pytest.raises(LocalModeError, match="is not writable"):
            est.fit()
        assert not list(locked.iterdir())


@pytest.mark.slow
def test_sequential_and_concurrent_jobs_keep_every_model(project, role) -> None:
    """One output_path, four jobs (two after each other, two at once): four models."""
    (project / "src" / "train.py").write_text(
        "import os, pathlib, sys\n"
        "pathlib.Path(os.environ['SM_MODEL_DIR'], 'who').write_text(sys.argv[2])\n"
    )

    def run(tag: str) -> str:
        est = estimator(project, role, hyperparameters={"tag": tag})
        est.fit()
        return str(est.model_data)

    models = [run("first"), run("second")]
    with concurrent.futures.ThreadPoolExecutor(2) as pool:
        models += list(pool.map(run, ["third", "fourth"]))
    assert len(set(models)) == 4
    for uri, tag in zip(models, ["first", "second", "third", "fourth"], strict=True):
        with tarfile.open(uri.removeprefix("file://")) as tar:
            assert tar.extractfile("who").read().decode() == tag  # type: ignore[union-attr]


def test_a_job_name_used_before_at_the_output_path_is_refused(project, role) -> None:
    (project / "out" / "taken").mkdir(parents=True)
    with pytest.raises(LocalModeError, match="never overwrites"):
        estimator(project, role).fit(job_name="taken")


def test_host_compiler_variables_do_not_leak_into_the_job(project, role, monkeypatch) -> None:
    # torch.compile in the calling process sets TORCHINDUCTOR_CACHE_DIR in os.environ;
    # the job must still keep its caches where the entrypoint puts them.
    monkeypatch.setenv("TORCHINDUCTOR_CACHE_DIR", "/tmp/torchinductor_host")
    monkeypatch.setenv("SM_MODEL_DIR", "/elsewhere")
    monkeypatch.setenv("MY_SETTING", "kept")
    # fit() called from a torchrun worker: the job's launcher decides these, not the caller.
    for name in ("RANK", "LOCAL_RANK", "WORLD_SIZE", "MASTER_ADDR", "TORCHELASTIC_RUN_ID"):
        monkeypatch.setenv(name, "3")
    monkeypatch.setenv("RANKING_FILE", "kept")
    est = estimator(project, role, environment={"XLA_FLAGS": "--xla_cpu_x=1"})
    job, _ = plan_process_job(est.job_spec(), est, None, "job-2")
    assert "TORCHINDUCTOR_CACHE_DIR" not in job.env and "SM_MODEL_DIR" not in job.env
    assert not {"RANK", "LOCAL_RANK", "WORLD_SIZE", "MASTER_ADDR", "TORCHELASTIC_RUN_ID"} & set(
        job.env
    )
    assert job.env["RANKING_FILE"] == "kept"
    assert job.env["MY_SETTING"] == "kept"
    assert job.env["XLA_FLAGS"] == "--xla_cpu_x=1"


CHECKPOINT_SCRIPT = """
import os, pathlib
model = pathlib.Path(os.environ["SM_MODEL_DIR"])
model.joinpath("uri.txt").write_text(os.environ.get("TRCOMP_CHECKPOINT_URI", "unset"))
model.joinpath("setting.txt").write_text(os.environ.get("MY_SETTING", "unset"))
pathlib.Path(os.environ["SAGEMAKER_BASE_DIR"], "checkpoints", "step-1").write_text("saved")
"""


@pytest.mark.slow
def test_fit_leaves_the_estimator_as_it_was(project: Path, role: str) -> None:
    (project / "src" / "train.py").write_text(CHECKPOINT_SCRIPT)
    checkpoints = project / "ckpt"
    est = estimator(
        project,
        role,
        checkpoint_s3_uri=f"file://{checkpoints}",
        environment={"MY_SETTING": "mine"},
    )
    names = ("checkpoint_s3_uri", "checkpoint_local_path", "output_path", "environment")
    before = {name: json.dumps(getattr(est, name)) for name in names}
    est.fit(job_name="checkpoint-job")
    assert {name: json.dumps(getattr(est, name)) for name in names} == before
    # The checkpoint location reached the job from its spec, as in the other run modes.
    assert (checkpoints / "step-1").read_text() == "saved"
    with tarfile.open(project / "out" / "checkpoint-job" / "output" / "model.tar.gz") as tar:
        uri = tar.extractfile("uri.txt").read().decode()  # type: ignore[union-attr]
        setting = tar.extractfile("setting.txt").read().decode()  # type: ignore[union-attr]
    assert uri == checkpoints.resolve().as_uri() and setting == "mine"
    assert est.latest_job_spec is not None
    assert est.latest_job_spec.checkpoint_s3_uri == f"file://{checkpoints}"


# A process-mode job in a Python that has trcomp[sdk-v2] but not trcomp[container].
SDK_ONLY_JOB = """
import sys
from trcomp import LocalModeError, PyTorch
assert "torch" not in sys.modules
try:
    PyTorch(
        entry_point="train.py", source_dir=sys.argv[1], role=sys.argv[2],
        instance_type="local_process", instance_count=1, output_path="file://" + sys.argv[3],
    ).fit()
except LocalModeError as error:
    print("REFUSED", error)
"""


def _site_packages_without(tmp_path: Path, hidden: tuple[str, ...]) -> Path:
    """This environment's site-packages, as links, minus the distributions ``hidden``."""
    import sagemaker

    site = Path(sagemaker.__file__).resolve().parents[1]
    shadow = tmp_path / "site-packages"
    shadow.mkdir()
    for entry in site.iterdir():
        if not entry.name.lower().startswith(hidden) and entry.suffix != ".pth":
            (shadow / entry.name).symlink_to(entry)
    return shadow


@pytest.mark.slow  # a child interpreter per case; not for make test-sdk-lowest
@pytest.mark.parametrize(
    ("hidden", "named"),
    [(("torch", "functorch"), "torch"), (("sagemaker_training",), "sagemaker_training")],
)
def test_process_mode_without_the_container_extra_says_what_to_install(
    project, role, tmp_path, hidden, named
) -> None:
    root = Path(__file__).resolve().parents[3]
    shadow = _site_packages_without(tmp_path, hidden)
    env = {
        **os.environ,
        # -S: no site-packages of this venv, only the shadow copy and the worktree.
        "PYTHONPATH": os.pathsep.join([str(shadow), str(root / "sdk"), str(root / "container")]),
        "SAGEMAKER_SUPPRESS_V2_WARNING": "1",
    }
    args = [str(project / "src"), role, str(project / "out")]
    done = subprocess.run(
        [sys.executable, "-S", "-c", SDK_ONLY_JOB, *args],
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    (refusal,) = [line for line in done.stdout.splitlines() if line.startswith("REFUSED")]
    assert f"does not have {named}" in refusal
    assert 'pip install "trcomp[container]"' in refusal
    assert not (project / "out").exists()  # refused before anything was created
