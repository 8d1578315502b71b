"""Which container image a job runs in: the version table and the image URIs.

Remote jobs use our repository in the caller's own ECR registry (push it there
with ``trcomp image push``); local mode uses a local tag built by
``make image`` / ``trcomp image build``. An explicit ``image_uri=`` always wins.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass
from typing import Literal

from trcomp._version import __version__
from trcomp.contract.errors import UnsupportedJobError

__all__ = [
    "DEFAULT_FRAMEWORK_VERSION",
    "DEFAULT_PY_VERSION",
    "DEFERRED_IMAGE",
    "IMAGES",
    "LOCAL_IMAGE",
    "REPOSITORY",
    "Device",
    "ImageVersions",
    "check_versions",
    "device_for_instance",
    "ecr_image_uri",
    "local_image_uri",
    "remote_image_uri",
    "versions_from_image",
]

REPOSITORY = "trcomp-training"
LOCAL_IMAGE = f"{REPOSITORY}:latest"
DEFAULT_FRAMEWORK_VERSION = "2.9.0"
DEFAULT_PY_VERSION = "py311"
DEFERRED_IMAGE = "trcomp-deferred-default-image"
"""Stands in for the default image inside an estimator until its URI is resolved
(that needs the caller's account, an STS call); never shown to users."""
Device = Literal["gpu", "cpu"]


@dataclass(frozen=True)
class ImageVersions:
    """One image trcomp builds: its torch version, Python version and devices."""

    torch: str
    python: str
    devices: tuple[Device, ...] = ("gpu", "cpu")

    def accepts(self, framework_version: str) -> bool:
        """``2.9.0`` and its short form ``2.9``, as the SageMaker SDK accepts both."""
        return framework_version in (self.torch, self.torch.rsplit(".", 1)[0])


IMAGES: tuple[ImageVersions, ...] = (ImageVersions(DEFAULT_FRAMEWORK_VERSION, DEFAULT_PY_VERSION),)
"""Every image trcomp builds (container/Dockerfile); the only versions a default image runs."""


def _supported() -> str:
    return ", ".join(f"torch {i.torch} with {i.python}" for i in IMAGES)


def check_versions(
    framework_version: str | None,
    py_version: str | None,
    *,
    argument: str = "framework_version",
    note: str = "",
) -> ImageVersions:
    """The image for these versions, or :class:`UnsupportedJobError` with the arguments to pass.

    ``None`` means "the default". Called only when the job uses trcomp's image: with
    ``image_uri=`` the versions are the user's business. ``argument`` is the estimator
    argument that holds the torch version (``pytorch_version`` for HuggingFace);
    ``note`` ends the error message (what else the estimator wants said).
    The error names every version argument that has no image, each with its
    replacement, so a script written for AWS's images (torch 1.x, py38/py39) is
    fixed in one edit.
    """
    torch_ok = [i for i in IMAGES if framework_version is None or i.accepts(framework_version)]
    found = [i for i in torch_ok if py_version is None or i.python == py_version]
    if found:
        return found[0]
    target = torch_ok[0] if torch_ok else IMAGES[0]
    wrong: list[tuple[str, str | None, str]] = []  # (argument, passed, replacement)
    if not torch_ok:
        wrong.append((argument, framework_version, target.torch))
    if py_version is not None and py_version != target.python:
        wrong.append(("py_version", py_version, target.python))
    given = ", ".join(f"{name}={passed!r}" for name, passed, _ in wrong)
    replacement = ", ".join(f"{name}={value!r}" for name, _, value in wrong)
    what = " with ".join(
        f"torch {passed}" if name == argument else str(passed) for name, passed, _ in wrong
    )
    raise UnsupportedJobError(
        f"{given}: trcomp builds no image for {what} (it builds {_supported()}), so the "
        f"job would fail to pull its image. Replace {given} with {replacement} (or leave "
        f"{'it' if len(wrong) == 1 else 'them'} out): the job will then run on torch "
        f"{target.torch} with {target.python}, so check your script works with them first; "
        f"or pass image_uri= an image of your own.{note}"
    )


def device_for_instance(instance_type: str | None) -> Device:
    """``gpu`` for NVIDIA GPU families and ``local_gpu``, else ``cpu``."""
    from trcomp.contract.instances import describe_instance

    if not instance_type:
        return "cpu"
    if not isinstance(instance_type, str):  # a pipeline variable: GPU jobs are the norm
        return "gpu"
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


def versions_from_image(image_uri: str | None) -> ImageVersions | None:
    """The versions of one of our images, read from its tag (``attach()`` needs them)."""
    found = re.search(rf"/{REPOSITORY}:[^-/]+-torch([0-9.]+)-(gpu|cpu)$", image_uri or "")
    if found is None:
        return None
    return next((i for i in IMAGES if i.torch == found.group(1)), None)


def local_image_uri() -> str:
    """The local tag used by local mode (``TRCOMP_LOCAL_IMAGE`` overrides it)."""
    return os.environ.get("TRCOMP_LOCAL_IMAGE", LOCAL_IMAGE)
