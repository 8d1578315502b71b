"""trcomp.docker_cli against stand-in ``docker`` CLIs: missing, hung, compose v1 or v2.

The real engine is exercised by tests/docker (preflight, stopping a job's containers).
"""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

from tests.helpers.commands import path_of_scripts
from trcomp import docker_cli
from trcomp.contract.errors import LocalModeError


def test_missing_cli_answers_127_and_require_docker_says_how(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("PATH", path_of_scripts(tmp_path))
    done = docker_cli.run_docker(["info"])
    assert done.returncode == docker_cli.NOT_FOUND and "not found" in done.stderr
    assert not docker_cli.image_present("trcomp-training:latest")
    assert docker_cli.compose_command() is None
    assert not docker_cli.engine_status().ok
    with pytest.raises(LocalModeError, match=r"Docker is not installed.*make docker-engine"):
        docker_cli.require_docker("run `make docker-engine`.")
    with pytest.raises(subprocess.CalledProcessError):
        docker_cli.run_docker(["push", "x"], check=True)


def test_a_hung_engine_answers_124(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    sleep = shutil.which("sleep")
    monkeypatch.setenv("PATH", path_of_scripts(tmp_path, docker=f"exec {sleep} 30"))
    done = docker_cli.run_docker(["info"], timeout=0.5)
    assert done.returncode == docker_cli.TIMED_OUT and "no answer" in done.stderr


def test_compose_v2_is_taken_first_like_the_sdk(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    docker = '[ "$1 $2" = "compose version" ] && echo "Docker Compose version v2.29.1"'
    monkeypatch.setenv(
        "PATH", path_of_scripts(tmp_path, docker=docker, **{"docker-compose": "exit 0"})
    )
    assert docker_cli.compose_command() == ["docker", "compose"]


def test_engine_status_reads_permission_denied(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    denied = (
        "echo 'permission denied while trying to connect to the Docker daemon socket' >&2; exit 1"
    )
    monkeypatch.setenv("PATH", path_of_scripts(tmp_path, docker=denied))
    status = docker_cli.engine_status()
    assert not status.ok and status.permission_denied and status.returncode == 1


def test_labelled_containers_are_stopped_then_removed(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    log = tmp_path / "calls"
    docker = f'echo "$*" >> {log}; [ "$1" = ps ] && printf "c1\\nc2\\n"; exit 0'
    monkeypatch.setenv("PATH", path_of_scripts(tmp_path, docker=docker))
    docker_cli.remove_labelled("com.trcomp.local-job=job-1", grace=100)
    assert log.read_text().splitlines() == [
        "ps -aq --filter label=com.trcomp.local-job=job-1",
        "stop --time 100 c1 c2",
        "rm --force c1 c2",
    ]
