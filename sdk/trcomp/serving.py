"""Which image a model made from a trcomp estimator serves with.

trcomp's image trains; it has no model server. ``create_model()`` and
``deploy()`` on a trcomp estimator therefore never hand the model the job's
image: the model gets the SageMaker SDK's own inference image for the
framework and versions (resolved by the SDK, offline, from its bundled
tables), or, when the SDK has none, a :class:`~trcomp.contract.errors.UnsupportedJobError`
before anything is created, saying which argument to pass.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from trcomp.contract.errors import UnsupportedJobError
from trcomp.session import quiet_sagemaker

quiet_sagemaker()

import sagemaker  # noqa: E402
from sagemaker import image_uris  # noqa: E402

if TYPE_CHECKING:
    from sagemaker.estimator import EstimatorBase

__all__ = ["check_inference_image"]

_HOW = (
    "Pass the image to serve with: create_model(image_uri=...) or deploy(..., image_uri=...), "
    "for example a SageMaker PyTorch inference image of a version close to the one you "
    "trained with (sagemaker.image_uris.retrieve('pytorch', region, version=..., "
    "image_scope='inference', ...))."
)


def _instance_type(estimator: EstimatorBase) -> str:
    # The SDK picks the cpu or gpu flavour from an instance type; any real one will do to
    # learn whether an image exists for these versions at all.
    instance_type = getattr(estimator, "instance_type", None)
    if isinstance(instance_type, str) and instance_type.startswith("ml."):
        return instance_type
    return "ml.m5.xlarge"


def _versions(estimator: EstimatorBase, framework: str) -> dict[str, Any]:
    if framework == "huggingface":
        return {
            "version": estimator.framework_version,
            "base_framework_version": f"pytorch{estimator.pytorch_version}",
        }
    return {"version": estimator.framework_version}


def check_inference_image(
    estimator: EstimatorBase, framework: str | None, training_image: str
) -> None:
    """Raise :class:`UnsupportedJobError` unless the SDK has an inference image for the model.

    Called by ``create_model()`` when no ``image_uri`` was passed to it;
    ``training_image`` names the job's image in the message. For
    ``trcomp.Estimator`` (``framework=None``) the image must always be passed.
    """
    if framework is None:
        raise UnsupportedJobError(
            f"{type(estimator).__name__}.create_model() has no image to serve with: the job's "
            f"image ({training_image}) runs training, and trcomp.Estimator has no framework "
            f"version to find an inference image for. {_HOW}"
        )
    versions = _versions(estimator, framework)
    described = f"framework_version={estimator.framework_version!r}"
    if framework == "huggingface":
        described = (
            f"transformers_version={estimator.framework_version!r}, "
            f"pytorch_version={estimator.pytorch_version!r}"
        )
    if not estimator.framework_version:
        raise UnsupportedJobError(
            f"{type(estimator).__name__}.create_model(): the estimator has no framework_version, "
            f"so no {framework} inference image can be found, and the job's image "
            f"({training_image}) cannot serve. {_HOW}"
        )
    try:
        image_uris.retrieve(
            framework,
            estimator.sagemaker_session.boto_region_name or "us-east-1",
            py_version=estimator.py_version,
            instance_type=_instance_type(estimator),
            image_scope="inference",
            **versions,
        )
    except ValueError as exc:
        reason = str(exc).split(". ", 1)[0]
        raise UnsupportedJobError(
            f"{type(estimator).__name__}.create_model(): the job's image ({training_image}) "
            f"trains and cannot serve, and the SageMaker SDK {sagemaker.__version__} has no "
            f"{framework} inference image for {described}, py_version={estimator.py_version!r} "
            f"({reason}). {_HOW}"
        ) from None
