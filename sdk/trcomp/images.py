"""Which container image a job runs in.

Remote jobs use our repository in the caller's own ECR registry (push it there
with ``trcomp image push``); local mode uses a local tag built by
``make image`` / ``trcomp image build``. An explicit ``image_uri=`` always wins.
"""

from __future__ import annotations

import os
from typing import Literal

from trcomp._version import __version__

__all__ = [
    "DEFAULT_FRAMEWORK_VERSION",
    "LOCAL_IMAGE",
    "REPOSITORY",
    "Device",
    "device_for_instance",
    "ecr_image_uri",
    "local_image_uri",
    "remote_image_uri",
]

REPOSITORY = "trcomp-training"
LOCAL_IMAGE = f"{REPOSITORY}:latest"
DEFAULT_FRAMEWORK_VERSION = "2.9.0"
Device = Literal["gpu", "cpu"]


def device_for_instance(instance_type: str | None) -> Device:
    """``gpu`` for NVIDIA GPU families and ``local_gpu``, else ``cpu``."""
    from trcomp.instances import describe_instance

    if not instance_type:
        return "cpu"
    info = describe_instance(instance_type)
    # Unknown families are most often new GPU families: give them the GPU image.
    return "gpu" if info.has_nvidia_gpu or info.kind == "unknown" else "cpu"


def image_tag(framework_version: str = DEFAULT_FRAMEWORK_VERSION, device: Device = "gpu") -> str:
    """The tag of our image for a torch version and device, e.g. ``0.1.0-torch2.9.0-gpu``."""
    return f"{__version__}-torch{framework_version}-{device}"


def remote_image_uri(
    region: str,
    account: str,
    framework_version: str = DEFAULT_FRAMEWORK_VERSION,
    device: Device = "gpu",
) -> str:
    """Our image in ``account``'s ECR registry in ``region``.

    ``TRCOMP_IMAGE_URI`` in the environment overrides it for every job.
    """
    override = os.environ.get("TRCOMP_IMAGE_URI")
    if override:
        return override
    return ecr_image_uri(region, account, framework_version, device)


def ecr_image_uri(
    region: str,
    account: str,
    framework_version: str = DEFAULT_FRAMEWORK_VERSION,
    device: Device = "gpu",
) -> str:
    """``<account>.dkr.ecr.<region>.amazonaws.com[.cn]/trcomp-training:<tag>``, no override."""
    domain = "amazonaws.com.cn" if region.startswith("cn-") else "amazonaws.com"
    return (
        f"{account}.dkr.ecr.{region}.{domain}/{REPOSITORY}:{image_tag(framework_version, device)}"
    )


def local_image_uri() -> str:
    """The local tag used by local mode (``TRCOMP_LOCAL_IMAGE`` overrides it)."""
    return os.environ.get("TRCOMP_LOCAL_IMAGE", LOCAL_IMAGE)
