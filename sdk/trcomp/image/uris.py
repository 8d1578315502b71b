"""Which container image a job runs in: the version table and the image URIs.

Remote jobs use our repository in the caller's own ECR registry (push it there
with ``trcomp image push``); local mode uses a local tag built by
``make image`` / ``trcomp image build``. An explicit ``image_uri=`` always wins.

:data:`IMAGES` is the one table of the torch versions trcomp runs: the image
build, the Makefile (``make install-214``, ``make image TORCH_VERSION=``), the
estimators' checks and process mode all read it.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass
from typing import Literal

from trcomp._version import __version__
from trcomp.contract.env import IMAGE_URI_ENV, LOCAL_IMAGE_ENV
from trcomp.contract.errors import UnsupportedJobError

__all__ = [
    "DEFAULT_FRAMEWORK_VERSION",
    "DEFAULT_PY_VERSION",
    "DEFERRED_IMAGE",
    "ENGINES",
    "IMAGES",
    "LOCAL_IMAGE",
    "REPOSITORY",
    "Device",
    "Engine",
    "ImageVersions",
    "check_versions",
    "default_image",
    "device_for_instance",
    "ecr_image_uri",
    "image_for",
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
Engine = Literal["inductor", "torch_xla", "jax"]
ENGINES: tuple[Engine, ...] = ("inductor", "torch_xla", "jax")
"""Every engine trcomp has: inductor (torch.compile) and the two engines of backend='xla'."""


@dataclass(frozen=True)
class ImageVersions:
    """One image trcomp builds: its torch and Python versions, engines and devices.

    ``transformers`` is the version ``trcomp.HuggingFace`` passes when the caller
    gives none (the SageMaker SDK wants one; transformers and torch come in pairs).
    ``cuda`` is the CUDA version of the public PyTorch image the GPU image builds on.
    """

    torch: str
    python: str
    engines: tuple[Engine, ...] = ENGINES
    transformers: str = "4.57"
    cuda: str = "12.8"
    devices: tuple[Device, ...] = ("gpu", "cpu")

    @property
    def short(self) -> str:
        """The ``major.minor`` form, e.g. ``2.14``."""
        return self.torch.rsplit(".", 1)[0]

    @property
    def runs_xla(self) -> bool:
        """Whether the image runs ``backend='xla'`` (torch-xla or the jax engine)."""
        return "torch_xla" in self.engines or "jax" in self.engines

    @property
    def base_image(self) -> str:
        """The public CUDA PyTorch image the GPU image builds on."""
        return f"pytorch/pytorch:{self.torch}-cuda{self.cuda}-cudnn9-runtime"

    @property
    def local_tag(self) -> str:
        """The tag local mode runs: ``trcomp-training:latest`` for the default version
        (the tag images built before there were several versions have), else
        ``trcomp-training:torch<version>``."""
        if self.torch == DEFAULT_FRAMEWORK_VERSION:
            return LOCAL_IMAGE
        return f"{REPOSITORY}:torch{self.torch}"

    def accepts(self, framework_version: str) -> bool:
        """``2.9.0`` and its short form ``2.9``, as the SageMaker SDK accepts both."""
        return framework_version in (self.torch, self.short)


IMAGES: tuple[ImageVersions, ...] = (
    ImageVersions(DEFAULT_FRAMEWORK_VERSION, DEFAULT_PY_VERSION),
    # torch-xla has no release after 2.9 and torchax fails to import on torch >= 2.13.
    ImageVersions(
        "2.14.1", DEFAULT_PY_VERSION, engines=("inductor",), transformers="5.24", cuda="13.0"
    ),
)
"""Every image trcomp builds (container/Dockerfile); the only versions a default image runs.

The first is the default (:data:`DEFAULT_FRAMEWORK_VERSION`): the one version that
runs every engine, so every config written for trcomp runs on it.
"""


def image_for(framework_version: str | None) -> ImageVersions | None:
    """The image for a torch version (``None``: the default one), or None when there is none."""
    if framework_version is None:
        return IMAGES[0]
    return next((i for i in IMAGES if i.accepts(framework_version)), None)


def default_image() -> ImageVersions:
    """The image of :data:`DEFAULT_FRAMEWORK_VERSION`."""
    return IMAGES[0]


def _supported() -> str:
    return ", ".join(f"torch {i.torch} with {i.python}" for i in IMAGES)


def check_versions(
    framework_version: str | None,
    py_version: str | None,
    *,
    argument: str = "framework_version",
    image_argument: str = "image_uri",
    note: str = "",
) -> ImageVersions:
    """The image for these versions, or :class:`UnsupportedJobError` with the arguments to pass.

    ``None`` means "the default". Called only when the job uses trcomp's image: with
    ``image_uri=`` the versions are the user's business. ``argument`` is the estimator
    argument that holds the torch version (``pytorch_version`` for HuggingFace);
    ``image_argument`` the one that takes the user's own image (``training_image``
    for ``trcomp.v3.ModelTrainer``); ``note`` ends the error message (what else
    the estimator wants said).
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
        f"or pass {image_argument}= an image of your own.{note}"
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
    override = os.environ.get(IMAGE_URI_ENV)
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


def local_image_uri(framework_version: str | None = None) -> str:
    """The local tag local mode runs for a torch version (``None``: the default).

    ``TRCOMP_LOCAL_IMAGE`` overrides it for every version: it names an image of the
    caller's choosing, as ``image_uri=`` does. A version with no image of trcomp's
    gets the default tag (the estimators refuse such versions before this is read).
    """
    override = os.environ.get(LOCAL_IMAGE_ENV)
    if override:
        return override
    image = image_for(framework_version)
    return image.local_tag if image is not None else LOCAL_IMAGE
