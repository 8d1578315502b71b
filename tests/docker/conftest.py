"""Fixtures for the Docker tests: the engine, trcomp's image, and job directories.

Tests here that need a running engine and the built image are marked
``container`` (excluded by default; ``make test-container`` runs them after
building the image on the offline base). They skip with a reason when the
engine or the image is absent, so `pytest -m container` on a laptop says what
is missing instead of failing.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

SCRIPTS = Path(__file__).parent / "scripts"


def _engine_running() -> bool:
    if shutil.which("docker") is None:
        return False
    probe = subprocess.run(["docker", "info"], capture_output=True, timeout=30, check=False)
    return probe.returncode == 0


@pytest.fixture(scope="session")
def docker_engine() -> None:
    """Skip unless a Docker engine answers."""
    if not _engine_running():
        pytest.skip("no running Docker engine: run `make docker-engine`")


@pytest.fixture(scope="session")
def image(docker_engine: None) -> str:
    """trcomp's local image tag; skip unless it is built."""
    from trcomp.image.uris import local_image_uri

    tag = local_image_uri()
    found = subprocess.run(["docker", "image", "inspect", tag], capture_output=True, check=False)
    if found.returncode != 0:
        pytest.skip(f"image {tag} is not built: run `make image OFFLINE=1`")
    return tag


@pytest.fixture
def quiet_aws(monkeypatch: pytest.MonkeyPatch) -> None:
    """No AWS settings from the developer's shell leak into a local job."""
    for name in (
        "AWS_PROFILE",
        "AWS_ACCESS_KEY_ID",
        "AWS_SECRET_ACCESS_KEY",
        "AWS_SESSION_TOKEN",
        "TRCOMP_IMAGE_URI",
    ):
        monkeypatch.delenv(name, raising=False)


@pytest.fixture
def job_dirs(tmp_path: Path) -> Iterator[dict[str, Path]]:
    """A source dir (the test scripts), a data channel and an output dir under tmp_path."""
    source = tmp_path / "code"
    shutil.copytree(SCRIPTS, source)
    data = tmp_path / "data"
    data.mkdir()
    (data / "numbers.txt").write_text("\n".join(str(i) for i in range(64)) + "\n")
    output = tmp_path / "output"
    output.mkdir()
    yield {"source": source, "data": data, "output": output, "root": tmp_path}
    # Jobs run as root in containers: make sure pytest can clean tmp_path.
    if os.getuid() != 0:
        subprocess.run(["chmod", "-R", "u+rwX", str(tmp_path)], check=False)
