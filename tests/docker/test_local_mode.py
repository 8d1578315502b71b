"""SageMaker local mode (Docker) end to end with trcomp's estimators and image."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import tarfile
import textwrap
import time
import uuid
from pathlib import Path
from typing import Any

import pytest

from tests.helpers.records import compilations, records_in_members
from trcomp.image.uris import IMAGES, local_image_uri
from trcomp.local.docker import JOB_LABEL

pytestmark = pytest.mark.container


def _estimator(dirs: dict[str, Path], role: str, **kwargs: Any) -> Any:
    import trcomp

    kwargs.setdefault("instance_type", "local")
    kwargs.setdefault("instance_count", 1)
    kwargs.setdefault("compiler_config", trcomp.TrainingCompilerConfig())
    return trcomp.PyTorch(
        entry_point=kwargs.pop("entry_point", "train_tiny.py"),
        source_dir=str(dirs["source"]),
        role=role,
        output_path=f"file://{dirs['output']}",
        **kwargs,
    )


def _members(tar_path: Path) -> dict[str, bytes]:
    with tarfile.open(tar_path) as tar:
        return {
            m.name.lstrip("./"): tar.extractfile(m).read()  # type: ignore[union-attr]
            for m in tar.getmembers()
            if m.isfile()
        }


def _artifacts(estimator: Any) -> Path:
    """The job's own folder of artifacts: ``<output_path>/<job name>/output``."""
    model = Path(str(estimator.model_data).removeprefix("file://"))
    assert model.parent.parent.name == estimator.latest_training_job.name
    return model.parent


def _job_containers(job_name: str, running: bool = False) -> list[str]:
    """This job's containers (found by its name in their environment).

    Other jobs may run on a shared engine at the same time: never count theirs.
    """
    listed = subprocess.run(
        ["docker", "ps", *([] if running else ["-a"]), "-q", "--filter", f"label={JOB_LABEL}"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout.split()
    if not listed:
        return []
    described = subprocess.run(
        ["docker", "inspect", "--format", "{{.Id}} {{range .Config.Env}}{{.}} {{end}}", *listed],
        capture_output=True,
        text=True,
        check=False,  # a container may be removed between the two calls
    ).stdout
    wanted = f"TRAINING_JOB_NAME={job_name}"
    return [line.split()[0] for line in described.splitlines() if wanted in line.split()]


def test_fit_with_compiler_lands_model_and_summary(
    image: str, job_dirs: dict[str, Path], role: str, quiet_aws: None
) -> None:
    estimator = _estimator(job_dirs, role, hyperparameters={"steps": 10})
    estimator.fit({"training": f"file://{job_dirs['data']}"})

    artifacts = _artifacts(estimator)
    assert artifacts.parent.parent == job_dirs["output"]
    model = _members(artifacts / "model.tar.gz")
    assert "model.pt" in model
    assert json.loads(model["info.json"])["backend"] == "inductor"
    output = _members(artifacts / "output.tar.gz")
    summary = json.loads(output["data/compiler/summary.json"])
    assert summary["backend"] == "inductor"
    assert summary["metrics"]["graphs_compiled"] >= 1
    # Counted, not timed: the compilations behind compile_time_s, and every step.
    (record,) = records_in_members(output)
    assert compilations(record) >= 1 and record["steps"] == 10
    assert "failure" not in output
    assert not _job_containers(estimator.latest_training_job.name)
    assert not list(job_dirs["source"].rglob("__pycache__"))


def test_two_containers_train_one_fsdp2_job_as_the_compiler_off_run(
    image: str,
    job_dirs: dict[str, Path],
    role: str,
    quiet_aws: None,
    capfd: pytest.CaptureFixture[str],
    tmp_path: Path,
) -> None:
    """Two hosts, one FSDP2 job under the default switch: each block compiled and checked
    with no code change, and the compiler-off run's losses (the script under torchrun here,
    two gloo ranks, no hook)."""
    estimator = _estimator(
        job_dirs,
        role,
        entry_point="train_fsdp2.py",
        instance_count=2,
        distribution={"torch_distributed": {"enabled": True}},
    )
    estimator.fit({"training": f"file://{job_dirs['data']}"})

    log = capfd.readouterr().out
    assert "rank 0/2" in log and "rank 1/2" in log  # both hosts' logs are shown
    artifacts = _artifacts(estimator)
    job = json.loads(_members(artifacts / "model.tar.gz")["losses.json"])
    assert len(job["hosts"]) == 2
    summary = json.loads(_members(artifacts / "output.tar.gz")["data/compiler/summary.json"])
    assert summary["compiled"].startswith("3 FSDP2 blocks of FSDPNet (by trcomp, no code change)")
    assert summary["verified"].startswith("3 FSDP2 blocks of FSDPNet matched eager")
    reference = tmp_path / "reference"
    env = {
        **{k: v for k, v in os.environ.items() if not k.startswith(("TRCOMP_", "TORCHINDUCTOR"))},
        "SM_CHANNEL_TRAINING": str(job_dirs["data"]),
        "SM_MODEL_DIR": str(reference),
        "OMP_NUM_THREADS": "1",
    }
    command = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node"]
    subprocess.run(
        [*command, "2", str(job_dirs["source"] / "train_fsdp2.py")],
        env=env,
        check=True,
        timeout=300,
    )
    off = json.loads((reference / "losses.json").read_text())["losses"]
    assert job["losses"] == pytest.approx(off, abs=1e-4)


def test_failing_script_shows_its_reason(
    image: str, job_dirs: dict[str, Path], role: str, quiet_aws: None
) -> None:
    from trcomp.contract.errors import LocalModeError

    estimator = _estimator(job_dirs, role, hyperparameters={"fail-with": "learning rate 42 is mad"})
    with pytest.raises(LocalModeError, match="learning rate 42 is mad") as caught:
        estimator.fit({"training": f"file://{job_dirs['data']}"})
    assert "docker-compose" not in str(caught.value).split(":")[0]
    assert caught.value.exit_code == 1  # type: ignore[attr-defined]
    assert "exit code 1" in str(caught.value)
    assert not _job_containers(estimator._current_job_name)


def test_file_checkpoints_keep_the_compile_cache_between_jobs(
    image: str, job_dirs: dict[str, Path], role: str, quiet_aws: None, tmp_path: Path
) -> None:
    """checkpoint_s3_uri=file://dir: the second job starts with the first one's warm cache."""
    checkpoints = tmp_path / "checkpoints"
    checkpoints.mkdir()
    owner = 4321
    os.chown(checkpoints, owner, owner)
    uri = f"file://{checkpoints}"
    summaries = []
    for _ in range(2):
        estimator = _estimator(
            job_dirs,
            role,
            hyperparameters={"steps": 5},
            checkpoint_s3_uri=uri,
            checkpoint_local_path="/opt/ml/my-checkpoints",  # the caches follow it
        )
        names = ("checkpoint_s3_uri", "checkpoint_local_path", "output_path", "environment")
        before = {name: json.dumps(getattr(estimator, name)) for name in names}
        estimator.fit({"training": f"file://{job_dirs['data']}"})
        # Given back after fit(): the job got them from its spec.
        assert {name: json.dumps(getattr(estimator, name)) for name in names} == before
        output = _members(_artifacts(estimator) / "output.tar.gz")
        summaries.append(json.loads(output["data/compiler/summary.json"]))
    cold, warm = summaries
    assert cold["backend"] == warm["backend"] == "inductor"
    assert cold["cache_warm"] is False and warm["cache_warm"] is True
    # The user's location, not the container's mount point.
    assert warm["cache_dir"] == f"{checkpoints.as_uri()}/trcomp-cache"
    # Inductor's own counters: the cold job missed its FX graph cache, the warm one hit it.
    cold_cache, warm_cache = (s["ranks"][0]["compile_cache"] for s in summaries)
    assert cold_cache["fxgraph_hit"] == 0 and cold_cache["fxgraph_miss"] > 0
    assert warm_cache["fxgraph_hit"] > 0 and warm_cache["fxgraph_miss"] == 0
    cache = checkpoints / "trcomp-cache"
    assert any(p.is_file() for p in cache.rglob("*"))
    assert not [p for p in checkpoints.rglob("*") if p.stat().st_uid != owner]


def test_no_root_owned_files_left(
    image: str, job_dirs: dict[str, Path], role: str, quiet_aws: None
) -> None:
    """The job writes into the user's code dir and channel; the files come back to their owner."""
    owner = 4321
    for top in (job_dirs["source"], job_dirs["data"], job_dirs["output"]):
        for path in [top, *top.rglob("*")]:
            os.chown(path, owner, owner)
    estimator = _estimator(
        job_dirs, role, hyperparameters={"steps": 2, "write-files": ""}, compiler_config=None
    )
    estimator.fit({"training": f"file://{job_dirs['data']}"})

    assert (job_dirs["source"] / "written-by-job.txt").stat().st_uid == owner
    for top in (job_dirs["source"], job_dirs["data"]):
        root_owned = [p for p in top.rglob("*") if p.stat().st_uid == 0]
        assert not root_owned


_FIT_AND_SLEEP = textwrap.dedent("""
    import signal, sys, trcomp
    signal.signal(signal.SIGINT, signal.default_int_handler)  # as in a terminal
    est = trcomp.PyTorch(entry_point="train_tiny.py", source_dir=sys.argv[1], role=sys.argv[2],
                         instance_type="local", instance_count=1,
                         output_path="file://" + sys.argv[3], hyperparameters={"sleep": 300},
                         environment={"TRCOMP_SIGTERM_GRACE_S": "5"})
    try:
        est.fit({"training": "file://" + sys.argv[4]}, job_name=sys.argv[5])
    except trcomp.JobInterrupted as exc:
        print(f"interrupted: {exc}", flush=True)
        sys.exit(130)
""")


def _start_driver(job_dirs: dict[str, Path], role: str, job_name: str) -> subprocess.Popen[str]:
    """A process that runs a sleeping job in fit(); returns once its container runs."""
    proc = subprocess.Popen(
        [
            sys.executable,
            "-c",
            _FIT_AND_SLEEP,
            str(job_dirs["source"]),
            role,
            str(job_dirs["output"]),
            str(job_dirs["data"]),
            job_name,
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    deadline = time.monotonic() + 120
    while not _job_containers(job_name, running=True) and time.monotonic() < deadline:
        time.sleep(0.5)
    if not _job_containers(job_name, running=True):
        proc.kill()
        raise AssertionError(f"the job's container never started: {proc.communicate()[0][-3000:]}")
    time.sleep(3)  # the script is in its sleep
    return proc


def test_ctrl_c_stops_the_containers(
    image: str, job_dirs: dict[str, Path], role: str, quiet_aws: None
) -> None:
    name = f"ctrl-c-{uuid.uuid4().hex[:8]}"
    proc = _start_driver(job_dirs, role, name)
    try:
        proc.send_signal(signal.SIGINT)  # what Ctrl-C sends to the foreground process
        out, _ = proc.communicate(timeout=90)
    finally:
        proc.kill()
    assert proc.returncode == 130, out[-3000:]
    assert "exit code 143" in out, out[-3000:]
    assert not _job_containers(name)


def test_sigkill_of_fit_stops_the_containers(
    image: str, job_dirs: dict[str, Path], role: str, quiet_aws: None
) -> None:
    """Nobody is left to press Ctrl-C: the watcher stops the job when fit() dies."""
    name = f"killed-{uuid.uuid4().hex[:8]}"
    proc = _start_driver(job_dirs, role, name)
    try:
        proc.kill()
        proc.wait(timeout=10)
        # Grace 5 s inside, docker stop waits 15 s: well within a minute.
        deadline = time.monotonic() + 60
        while _job_containers(name) and time.monotonic() < deadline:
            time.sleep(0.5)
    finally:
        proc.kill()
    assert not _job_containers(name)


def test_two_jobs_with_one_output_path_keep_both_models(
    image: str, job_dirs: dict[str, Path], role: str, quiet_aws: None
) -> None:
    models = []
    for _ in range(2):
        estimator = _estimator(job_dirs, role, hyperparameters={"steps": 2}, compiler_config=None)
        estimator.fit({"training": f"file://{job_dirs['data']}"})
        models.append(_artifacts(estimator) / "model.tar.gz")
    assert models[0] != models[1]
    assert all("model.pt" in _members(model) for model in models)


@pytest.mark.parametrize("version", [image.torch for image in IMAGES])
def test_a_plain_loop_compiles_with_no_code_change_in_docker(
    version: str, docker_engine: None, job_dirs: dict[str, Path], role: str, quiet_aws: None
) -> None:
    """On each torch version whose image is built (CI builds the default's; the 2.14
    one: `make image OFFLINE=1 TORCH_VERSION=2.14`, then this test)."""
    import shutil

    import trcomp

    tag = local_image_uri(version)
    built = subprocess.run(["docker", "image", "inspect", tag], capture_output=True, check=False)
    if built.returncode != 0:
        pytest.skip(f"image {tag} is not built: run `make image OFFLINE=1 TORCH_VERSION={version}`")

    plain = Path(__file__).parents[1] / "container" / "scripts" / "plain_loop.py"
    shutil.copy(plain, job_dirs["source"] / "plain_loop.py")
    losses = {}
    for name, config in {
        "auto": trcomp.TrainingCompilerConfig(),
        "off": trcomp.TrainingCompilerConfig(enabled=False),
    }.items():
        estimator = _estimator(
            job_dirs,
            role,
            entry_point="plain_loop.py",
            compiler_config=config,
            framework_version=version,
            hyperparameters={"steps": 16},
        )
        estimator.fit({"training": f"file://{job_dirs['data']}"})
        artifacts = _artifacts(estimator)
        losses[name] = json.loads(_members(artifacts / "model.tar.gz")["losses.json"])
        summary = json.loads(_members(artifacts / "output.tar.gz")["data/compiler/summary.json"])
        assert summary["versions"]["torch"].split("+")[0] == version
        if name == "auto":
            assert summary["metrics"]["graphs_compiled"] >= 1
            # On 2.14 the text also says the model was compiled ahead of time and saved.
            assert summary["compiled"].startswith("TinyLM (by trcomp, no code change")
            assert summary["compiled"].endswith("; 1 graph"), summary["compiled"]
            assert summary["speedup"]["source"] == "measured"
    assert len(losses["auto"]) == 16
    assert all(abs(a - b) < 1e-4 for a, b in zip(losses["auto"], losses["off"], strict=True))
