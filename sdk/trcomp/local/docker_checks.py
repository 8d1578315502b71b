"""Can a Docker local-mode job start here? Checks with messages that say how to fix it.

Each check is one quick docker CLI call (about 20 ms each here, through
:mod:`trcomp.docker_cli`), so local mode runs them before every job instead of
letting the SDK fail deep inside.
"""

from __future__ import annotations

import os
import shutil

from trcomp import docker_cli
from trcomp.contract.errors import LocalModeError
from trcomp.contract.instances import DOCKER_LOCAL_MODES

__all__ = ["preflight"]

_FIX_ENGINE = (
    "Start it with `make docker-engine` (installs and starts Docker on Debian/Ubuntu) "
    "or `sudo systemctl start docker`; or run without Docker: instance_type='local_process'."
)


def _check_engine() -> None:
    docker_cli.require_docker(
        "instance_type='local' runs the job "
        "in a container. Install it with `make docker-engine`, or run without Docker: "
        "instance_type='local_process'."
    )
    engine = docker_cli.engine_status()
    if engine.ok:
        return
    where = os.environ.get("DOCKER_HOST") or "the default socket (unix:///var/run/docker.sock)"
    if engine.permission_denied:
        raise LocalModeError(
            f"the Docker engine at {where} refused this user (permission denied). "
            "Add yourself to the `docker` group (`sudo usermod -aG docker $USER`, then log in "
            "again) or run as root."
        )
    last = (
        engine.problem[-1]
        if engine.problem
        else f"`docker info` exited with code {engine.returncode}"
    )
    raise LocalModeError(
        f"the Docker engine is not running or not reachable at {where}: {last}. {_FIX_ENGINE}"
    )


def _check_image(image_uri: str) -> None:
    if docker_cli.image_present(image_uri):
        return
    if ".dkr.ecr." in image_uri:
        return  # local mode logs in to ECR and pulls it with the caller's credentials
    raise LocalModeError(
        f"image {image_uri} is not in the local Docker engine, so local mode cannot start it. "
        "Build trcomp's image with `make image` or `trcomp image build` "
        "(offline: `make image OFFLINE=1`), or `docker pull` it if it lives in a registry."
    )


# Docker hands GPUs to containers through the NVIDIA Container Toolkit: either a
# registered "nvidia" runtime or the prestart hook that `--gpus` / compose
# device reservations call.
_GPU_HOOKS = ("nvidia-container-runtime-hook", "nvidia-container-runtime", "nvidia-ctk")


def _check_gpu_support() -> None:
    if os.environ.get("DOCKER_HOST"):
        return  # a remote engine: its host's tools are not visible from here
    if "nvidia" in docker_cli.runtimes() or any(shutil.which(tool) for tool in _GPU_HOOKS):
        return
    raise LocalModeError(
        "instance_type='local_gpu' needs the NVIDIA Container Toolkit, which this Docker "
        "engine does not have (no 'nvidia' runtime, no nvidia-container-runtime-hook): "
        "install it (https://docs.nvidia.com/datacenter/cloud-native/container-toolkit/) "
        "or use instance_type='local' to run on CPU."
    )


def preflight(image_uri: str, instance_type: str) -> None:
    """Check that a Docker local-mode job can start; raise ``LocalModeError`` saying how if not.

    Checks, in order: the docker CLI, a running engine this user may use, a
    compose CLI, ``image_uri`` present locally (ECR images are left to the
    SDK, which pulls them) and, for ``local_gpu``, the NVIDIA Container Toolkit.
    ``instance_type`` is ``local`` or ``local_gpu``.
    """
    if instance_type not in DOCKER_LOCAL_MODES:
        raise LocalModeError(
            f"instance_type {instance_type!r} is not a Docker local mode; use 'local' or "
            "'local_gpu' (or 'local_process' for no Docker)."
        )
    _check_engine()
    if docker_cli.compose_command() is None:
        raise LocalModeError(
            "docker compose is not installed: SageMaker local mode starts containers with it. "
            "Install the compose plugin or `docker-compose` (`make docker-engine` does it)."
        )
    _check_image(image_uri)
    if instance_type == "local_gpu":
        _check_gpu_support()
