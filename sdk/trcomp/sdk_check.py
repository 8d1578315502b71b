"""Which SageMaker SDK this environment has, and what to install when it is the wrong one.

SDK v2 (``sagemaker`` 2.x, the estimators) and SDK v3 (``sagemaker-train``,
``ModelTrainer``) both own the ``sagemaker`` import name and need different
sagemaker-core majors, so one environment holds one of them. ``trcomp`` itself
imports in both; :mod:`trcomp.estimators` needs v2 and :mod:`trcomp.v3` needs v3.
"""

from __future__ import annotations

from importlib import metadata
from typing import Literal

__all__ = ["installed_sdks", "wrong_sdk_message"]

SdkGeneration = Literal["v2", "v3"]

_WHAT = {
    "v2": (
        "the SageMaker SDK v2 (sagemaker>=2.230,<3)",
        "trcomp.PyTorch, trcomp.HuggingFace and trcomp.Estimator need",
        "pip install 'trcomp[sdk-v2]' (make install)",
        "trcomp.v3.ModelTrainer, which works",
    ),
    "v3": (
        "the SageMaker SDK v3 (sagemaker-train)",
        "trcomp.v3.ModelTrainer needs",
        "pip install 'trcomp[sdk-v3]' (make install-v3)",
        "trcomp.PyTorch, trcomp.HuggingFace or trcomp.Estimator, which work",
    ),
}


def installed_sdks() -> list[str]:
    """The SageMaker SDK distributions installed here, as ``name==version`` (metadata only)."""
    found = []
    for name in ("sagemaker", "sagemaker-train", "sagemaker-core"):
        try:
            found.append(f"{name}=={metadata.version(name)}")
        except metadata.PackageNotFoundError:
            continue
    return found


def wrong_sdk_message(needed: SdkGeneration, error: BaseException) -> str:
    """Why ``needed`` cannot be imported here and the one thing to do."""
    sdk, users, install, other = _WHAT[needed]
    present = ", ".join(installed_sdks()) or "no SageMaker SDK"
    return (
        f"{users} {sdk}, which this environment does not have ({present}; importing it "
        f"failed with {type(error).__name__}: {error}). The SDK v2 and v3 cannot share one "
        f"environment: in a separate virtual environment, run {install}; or use {other} "
        "with the SDK installed here. See docs/v3.md."
    )
