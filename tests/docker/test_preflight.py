"""Local mode refuses to start with a message that says what to do."""

from __future__ import annotations

import os
import shutil
import stat
import subprocess
from pathlib import Path

import pytest
import yaml

from trcomp.contract.errors import LocalModeError
from trcomp.local.docker import JOB_LABEL, compose_command, preflight

needs_docker_cli = pytest.mark.skipif(shutil.which("docker") is None, reason="no docker CLI")


def _bin_dir(tmp_path: Path, **tools: str) -> Path:
    """A directory of executables: name -> shell script body (or a path to link to)."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    for name, body in tools.items():
        target = bin_dir / name
        if body.startswith("/"):
            target.symlink_to(body)
        else:
            target.write_text("#!/bin/sh\n" + body + "\n")
            target.chmod(target.stat().st_mode | stat.S_IEXEC)
    return bin_dir


def test_no_docker_cli(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PATH", str(_bin_dir(tmp_path)))
    with pytest.raises(LocalModeError, match=r"Docker is not installed.*make docker-engine"):
        preflight("trcomp-training:latest", "local")


@needs_docker_cli
def test_engine_not_running(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("DOCKER_HOST", f"unix://{tmp_path}/dead.sock")
    with pytest.raises(LocalModeError, match=r"not running or not reachable.*make docker-engine"):
        preflight("trcomp-training:latest", "local")


def test_not_a_docker_mode() -> None:
    with pytest.raises(LocalModeError, match="local_process"):
        preflight("trcomp-training:latest", "ml.p4d.24xlarge")


@pytest.mark.container
def test_compose_missing(image: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    docker = shutil.which("docker")
    assert docker
    monkeypatch.setenv("PATH", str(_bin_dir(tmp_path, docker=docker)))
    assert compose_command() is None
    with pytest.raises(LocalModeError, match="docker compose is not installed"):
        preflight(image, "local")


@pytest.mark.container
def test_image_not_built(image: str) -> None:
    with pytest.raises(LocalModeError, match=r"not in the local Docker engine.*make image"):
        preflight("trcomp-training:never-built", "local")


@pytest.mark.container
def test_estimator_reports_missing_image(
    image: str, tmp_path: Path, role: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    import trcomp

    monkeypatch.setenv("TRCOMP_LOCAL_IMAGE", "trcomp-training:never-built")
    (tmp_path / "train.py").write_text("print('never runs')\n")
    estimator = trcomp.PyTorch(
        entry_point="train.py",
        source_dir=str(tmp_path),
        role=role,
        instance_type="local",
        instance_count=1,
        output_path=f"file://{tmp_path}",
    )
    with pytest.raises(LocalModeError, match="trcomp image build"):
        estimator.fit()


@pytest.mark.container
def test_local_gpu_needs_the_nvidia_toolkit(
    image: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    docker = shutil.which("docker")
    compose = shutil.which("docker-compose")
    assert docker and compose
    runtimes = subprocess.run(
        ["docker", "info", "--format", "{{json .Runtimes}}"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    if "nvidia" in runtimes:
        pytest.skip("this engine has the NVIDIA runtime")
    tools = {"docker": docker, "docker-compose": compose}
    monkeypatch.setenv("PATH", str(_bin_dir(tmp_path, **tools)))
    with pytest.raises(LocalModeError, match="NVIDIA Container Toolkit"):
        preflight(image, "local_gpu")


@pytest.mark.container
def test_local_gpu_compose_file_asks_for_gpus(
    image: str, tmp_path: Path, role: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """No GPU here: a stand-in docker-compose keeps the file local mode generates."""
    import trcomp

    kept = tmp_path / "compose.yaml"
    fake = _bin_dir(
        tmp_path,
        **{
            "docker-compose": (
                'while [ $# -gt 0 ]; do [ "$1" = -f ] && cp "$2" ' + str(kept) + "; shift; done"
            ),
            "nvidia-container-runtime-hook": "exit 0",  # what preflight looks for
        },
    )
    monkeypatch.setenv("PATH", f"{fake}{os.pathsep}{os.environ['PATH']}")
    source = tmp_path / "code"
    source.mkdir()
    (source / "train.py").write_text("print('never runs')\n")
    estimator = trcomp.PyTorch(
        entry_point="train.py",
        source_dir=str(source),
        role=role,
        instance_type="local_gpu",
        instance_count=1,
        output_path=f"file://{tmp_path / 'out'}",
        compiler_config=trcomp.TrainingCompilerConfig(),
    )
    estimator.fit()

    compose = yaml.safe_load(kept.read_text())
    (service,) = compose["services"].values()
    devices = service["deploy"]["resources"]["reservations"]["devices"]
    assert devices == [{"count": "all", "capabilities": ["gpu"]}]
    assert service["shm_size"].endswith("g")  # not Docker's 64 MB: NCCL and DataLoaders need it
    assert service["image"] == image
    assert JOB_LABEL in service["labels"]
    # Compose's own stop (Ctrl-C at a terminal) waits longer than the runner's grace.
    assert service["stop_grace_period"] == "110s"
    assert service["command"] == "train"
