"""The image build command and context, without running Docker."""

from __future__ import annotations

import io
import tarfile
import zipfile
from pathlib import Path

import pytest

from trcomp.contract.errors import LocalModeError
from trcomp.image.build import (
    OFFLINE_BASE_IMAGE,
    build_image,
    container_requirements,
    source_root,
)
from trcomp.image.uris import LOCAL_IMAGE
from trcomp.local.docker import failure_reason

_METADATA = """Metadata-Version: 2.1
Name: trcomp
Version: 0.1.0
Requires-Dist: pydantic<3,>=2.6
Requires-Dist: sagemaker<3,>=2.230
Requires-Dist: boto3>=1.34
Provides-Extra: container
Requires-Dist: torch==2.9.0; extra == "container"
Requires-Dist: sagemaker-training>=5.1; extra == "container"
Provides-Extra: jax-cuda
Requires-Dist: jax-cuda12-plugin[with-cuda]==0.10.2; extra == "jax-cuda"
Provides-Extra: dev
Requires-Dist: pytest>=8; extra == "dev"
"""


def test_build_command_defaults_to_the_dockerfile_base(tmp_path: Path) -> None:
    cmd = build_image(None, LOCAL_IMAGE, tmp_path)
    assert cmd == [
        "docker",
        "build",
        "--network",
        "host",
        "--force-rm",
        "-t",
        "trcomp-training:latest",
        "-f",
        str(tmp_path / "Dockerfile"),
        str(tmp_path),
    ]


def test_build_command_offline_base_no_cache(tmp_path: Path) -> None:
    cmd = build_image(OFFLINE_BASE_IMAGE, "t:1", tmp_path, no_cache=True)
    assert cmd[9:11] == ["--build-arg", "BASE_IMAGE=trcomp-base:bookworm"]
    assert "--no-cache" in cmd
    assert cmd[-1] == str(tmp_path)


def test_container_requirements_drop_client_sdk_and_other_extras(tmp_path: Path) -> None:
    wheel = tmp_path / "trcomp-0.1.0-py3-none-any.whl"
    with zipfile.ZipFile(wheel, "w") as zf:
        zf.writestr("trcomp-0.1.0.dist-info/METADATA", _METADATA)
    assert container_requirements(wheel) == [
        "pydantic<3,>=2.6",
        "boto3>=1.34",
        "torch==2.9.0",
        "sagemaker-training>=5.1",
    ]


def test_container_requirements_add_jax_cuda_plugin_for_gpu_images(tmp_path: Path) -> None:
    wheel = tmp_path / "trcomp-0.1.0-py3-none-any.whl"
    with zipfile.ZipFile(wheel, "w") as zf:
        zf.writestr("trcomp-0.1.0.dist-info/METADATA", _METADATA)
    requirements = container_requirements(wheel, jax_cuda=True)
    assert requirements[-1] == "jax-cuda12-plugin[with-cuda]==0.10.2"
    assert "pytest>=8" not in requirements


def test_source_root_is_this_checkout() -> None:
    assert (source_root() / "container" / "Dockerfile").is_file()


def test_source_root_refuses_a_dir_without_dockerfile(tmp_path: Path) -> None:
    with pytest.raises(LocalModeError, match="--source"):
        source_root(tmp_path)


def _tar(path: Path, files: dict[str, bytes]) -> Path:
    with tarfile.open(path, "w:gz") as tar:
        for name, body in files.items():
            info = tarfile.TarInfo(name)
            info.size = len(body)
            tar.addfile(info, io.BytesIO(body))
    return path


def test_failure_reason_reads_the_failure_member(tmp_path: Path) -> None:
    tar = _tar(tmp_path / "output.tar.gz", {"data/x": b"", "failure": b"ValueError: boom\n"})
    assert failure_reason(tar) == "ValueError: boom"
    assert failure_reason(_tar(tmp_path / "ok.tar.gz", {"data/x": b"1"})) is None
    assert failure_reason(tmp_path / "missing.tar.gz") is None
