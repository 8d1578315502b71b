"""Estimators that take ``compiler_config=``: ``PyTorch``, ``HuggingFace``, ``Estimator``.

They are the SageMaker SDK v2 classes with three changes: the compiler config is
validated in the constructor (nothing is uploaded before that), its
hyperparameters and metric definitions are merged into the job, and the image
defaults to trcomp's. ``instance_type="local_process"`` runs the job on this
machine without Docker (see docs/local-mode.md).

The part they share lives in :mod:`trcomp.estimator_mixin`. Each estimator
describes itself as one :class:`~trcomp.jobspec.JobSpec` (:meth:`job_spec`)
when a job is prepared: in the constructor for the compiler checks, and at
every ``fit()`` for the run mode (process, Docker local mode, SageMaker), which
reads the spec, not the estimator. ``fit()`` leaves the estimator's attributes
as they were.
"""

from __future__ import annotations

import logging
from typing import Any

from trcomp.session import quiet_sagemaker

quiet_sagemaker()

try:
    import sagemaker.estimator
    import sagemaker.huggingface
    import sagemaker.pytorch
except ImportError as _missing:  # a v3 environment, or no SDK at all
    from trcomp.sdk_check import wrong_sdk_message

    raise ImportError(wrong_sdk_message("v2", _missing)) from None

from trcomp.contract.errors import UnsupportedJobError  # noqa: E402
from trcomp.contract.instances import PROCESS_MODE  # noqa: E402
from trcomp.estimator_mixin import _CompilerMixin, as_trcomp_config  # noqa: E402
from trcomp.image.uris import (  # noqa: E402
    DEFAULT_FRAMEWORK_VERSION,
    DEFAULT_PY_VERSION,
    check_versions,
    default_image,
    image_for,
)

__all__ = ["PROCESS_MODE", "Estimator", "HuggingFace", "PyTorch", "as_trcomp_config"]

logger = logging.getLogger("trcomp")

DEFAULT_TRANSFORMERS_VERSION = default_image().transformers
"""``trcomp.HuggingFace``'s transformers version with the default torch; each torch
version of :data:`trcomp.image.uris.IMAGES` has its own (``ImageVersions.transformers``)."""
# transformers_version left out: the one paired with pytorch_version in IMAGES.
_PAIRED = "paired-with-pytorch-version"


def _refuse_mxnet(kwargs: dict[str, Any], replacement: str) -> None:
    """Refuse ``mxnet_version=``, which the SDK's classes take in ``**kwargs`` and ignore."""
    version = kwargs.get("mxnet_version")
    if version is not None:
        raise UnsupportedJobError(
            f"mxnet_version={version!r}: this estimator runs PyTorch, not MXNet, and the "
            f"SageMaker SDK would ignore the argument and run PyTorch "
            f"{DEFAULT_FRAMEWORK_VERSION} without a word. Pass "
            f"{replacement}={DEFAULT_FRAMEWORK_VERSION!r} instead (the torch version of "
            "trcomp's image) and port the script to PyTorch; MXNet has no compiler in trcomp."
        )
    kwargs.pop("mxnet_version", None)


class PyTorch(_CompilerMixin, sagemaker.pytorch.PyTorch):  # type: ignore[misc]
    """``sagemaker.pytorch.PyTorch`` with ``compiler_config=`` and trcomp's image.

    ``framework_version`` is ``"2.9"`` (the default, 2.9.0: inductor and both XLA
    engines) or ``"2.14"`` (2.14.1: inductor only); ``py_version`` defaults to
    py311. Each version has its own image (docs/configuration.md).
    """

    def __init__(
        self,
        entry_point: str | None = None,
        framework_version: str | None = DEFAULT_FRAMEWORK_VERSION,
        py_version: str | None = DEFAULT_PY_VERSION,
        source_dir: str | None = None,
        hyperparameters: dict[str, Any] | None = None,
        image_uri: str | None = None,
        distribution: dict[str, Any] | None = None,
        compiler_config: Any = None,
        **kwargs: Any,
    ) -> None:
        _refuse_mxnet(kwargs, "framework_version")
        if image_uri is None:
            check_versions(framework_version, py_version)
        image = self._trcomp_prepare(compiler_config, image_uri, kwargs, framework_version)
        super().__init__(
            entry_point=entry_point,
            framework_version=framework_version,
            py_version=py_version,
            source_dir=source_dir,
            hyperparameters=hyperparameters,
            image_uri=image,
            distribution=None,
            compiler_config=None,
            **kwargs,
        )
        self._trcomp_finish(distribution)

    _trcomp_framework = "pytorch"

    @classmethod
    def _trcomp_attach_versions(cls, params: dict[str, Any], torch: str, python: str) -> None:
        params.update(framework_version=torch, py_version=python)


class HuggingFace(_CompilerMixin, sagemaker.huggingface.HuggingFace):  # type: ignore[misc]
    """``sagemaker.huggingface.HuggingFace`` with ``compiler_config=`` and trcomp's image.

    As in the SDK, ``framework_version`` is the transformers version and
    ``pytorch_version`` the torch version. Versions default to trcomp's image
    (PyTorch 2.9.0, py311); ``pytorch_version="2.14"`` picks the 2.14 image.
    ``transformers_version`` defaults to the version paired with that torch in
    :data:`trcomp.image.uris.IMAGES` (4.57 with 2.9, 5.24 with 2.14); list the
    version the script needs in its requirements.txt (docs/migration.md).
    ``tensorflow_version`` is refused with trcomp's image or with a compiler
    config (trcomp compiles PyTorch only), and ``mxnet_version`` always;
    ``attach()`` of an old Training Compiler TensorFlow job keeps it on its own
    image, as the SDK's class does, with ``compiler_config`` None.
    """

    def __init__(
        self,
        entry_point: str,
        py_version: str | None = DEFAULT_PY_VERSION,
        transformers_version: str | None = _PAIRED,
        pytorch_version: str | None = DEFAULT_FRAMEWORK_VERSION,
        source_dir: str | None = None,
        hyperparameters: dict[str, Any] | None = None,
        image_uri: str | None = None,
        distribution: dict[str, Any] | None = None,
        compiler_config: Any = None,
        tensorflow_version: str | None = None,
        **kwargs: Any,
    ) -> None:
        _refuse_mxnet(kwargs, "pytorch_version")
        config = as_trcomp_config(compiler_config)
        if tensorflow_version is not None and image_uri is None:
            raise UnsupportedJobError(
                f"tensorflow_version={tensorflow_version!r}: trcomp compiles PyTorch only and "
                "its image has no TensorFlow, so the job would silently become a PyTorch job. "
                f"Pass pytorch_version={DEFAULT_FRAMEWORK_VERSION!r} instead, or use "
                "sagemaker.huggingface.HuggingFace without compiler_config for TensorFlow."
            )
        if tensorflow_version is not None and config is not None and config.enabled:
            raise UnsupportedJobError(
                f"tensorflow_version={tensorflow_version!r} with compiler_config: trcomp "
                f"compiles PyTorch only, so it cannot compile this TensorFlow job on "
                f"{image_uri}. Leave compiler_config out to run it uncompiled on that image, "
                f"or pass pytorch_version={DEFAULT_FRAMEWORK_VERSION!r} for a PyTorch job."
            )
        if transformers_version == _PAIRED:
            paired = image_for(pytorch_version) if image_uri is None else None
            transformers_version = (paired or default_image()).transformers
        if image_uri is None:
            if transformers_version is None:
                raise UnsupportedJobError(
                    "transformers_version is None: pass the transformers version the script "
                    f"uses (default {DEFAULT_TRANSFORMERS_VERSION!r}), as the SageMaker SDK needs"
                )
            check_versions(
                pytorch_version,
                py_version,
                argument="pytorch_version",
                note=(
                    f" transformers_version={transformers_version!r} is passed on as it is: "
                    "transformers is not in trcomp's image, so list a version that works "
                    "with that torch in the script's requirements.txt."
                ),
            )
        image = self._trcomp_prepare(config, image_uri, kwargs, pytorch_version)
        super().__init__(
            py_version=py_version,  # type: ignore[arg-type]  # None on attach(), as in the SDK
            entry_point=entry_point,
            transformers_version=transformers_version,
            pytorch_version=pytorch_version,
            tensorflow_version=tensorflow_version,
            source_dir=source_dir,
            hyperparameters=hyperparameters,
            image_uri=image,
            distribution=None,
            compiler_config=None,
            **kwargs,
        )
        self._trcomp_finish(distribution)

    _trcomp_framework = "huggingface"

    def _trcomp_torch_version(self) -> str | None:
        return getattr(self, "pytorch_version", None)

    @classmethod
    def _trcomp_attach_versions(cls, params: dict[str, Any], torch: str, python: str) -> None:
        # transformers is not in our image, so its version is not in the tag: left None.
        params.update(pytorch_version=torch, py_version=python)

    @classmethod
    def _trcomp_compiled_by_its_image(cls, params: dict[str, Any]) -> bool:
        # The old Training Compiler's TensorFlow jobs: trcomp could not have compiled
        # them, their own image did. attach() keeps them as the SDK's class does.
        if params.get("tensorflow_version") is None:
            return False
        params.setdefault("pytorch_version", None)  # not this class's default torch
        return True


class Estimator(_CompilerMixin, sagemaker.estimator.Estimator):  # type: ignore[misc]
    """``sagemaker.estimator.Estimator`` (bring your own image) with ``compiler_config=``.

    ``image_uri`` defaults to trcomp's image for ``framework_version`` (the torch
    version, as on ``PyTorch``: ``"2.9"``, the default, or ``"2.14"``); pass your
    own image built ``FROM`` it (or with trcomp installed and
    ``SAGEMAKER_TRAINING_MODULE`` set). ``framework_version`` is trcomp's argument:
    the SDK's ``Estimator`` has none.
    """

    def __init__(
        self,
        image_uri: str | None = None,
        compiler_config: Any = None,
        distribution: dict[str, Any] | None = None,
        framework_version: str | None = None,
        **kwargs: Any,
    ) -> None:
        if image_uri is None:
            check_versions(framework_version, None)
        self.__dict__["_trcomp_torch"] = framework_version
        image = self._trcomp_prepare(compiler_config, image_uri, kwargs, framework_version)
        super().__init__(image_uri=image, **kwargs)
        self._trcomp_finish(distribution)

    def _trcomp_torch_version(self) -> str | None:
        torch: str | None = self.__dict__.get("_trcomp_torch")
        return torch

    def _trcomp_compiler_hyperparameters(self) -> dict[str, str]:
        # The SDK's plain Estimator knows no compiler_config: this is its one writer.
        return {} if self._trcomp_config is None else self._trcomp_config.to_hyperparameters()
