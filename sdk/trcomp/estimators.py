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
)

__all__ = ["PROCESS_MODE", "Estimator", "HuggingFace", "PyTorch", "as_trcomp_config"]

logger = logging.getLogger("trcomp")

DEFAULT_TRANSFORMERS_VERSION = "4.57"


class PyTorch(_CompilerMixin, sagemaker.pytorch.PyTorch):  # type: ignore[misc]
    """``sagemaker.pytorch.PyTorch`` with ``compiler_config=`` and trcomp's image.

    ``framework_version`` defaults to 2.9.0 and ``py_version`` to py311, the
    versions in trcomp's image.
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
        if image_uri is None:
            check_versions(framework_version, py_version)
        image = self._trcomp_prepare(compiler_config, image_uri, kwargs)
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
    (PyTorch 2.9.0, py311); transformers is not in that image, so list the
    version the script needs in its requirements.txt (docs/migration.md).
    ``tensorflow_version`` is refused: trcomp compiles PyTorch only.
    """

    def __init__(
        self,
        entry_point: str,
        py_version: str | None = DEFAULT_PY_VERSION,
        transformers_version: str | None = DEFAULT_TRANSFORMERS_VERSION,
        pytorch_version: str | None = DEFAULT_FRAMEWORK_VERSION,
        source_dir: str | None = None,
        hyperparameters: dict[str, Any] | None = None,
        image_uri: str | None = None,
        distribution: dict[str, Any] | None = None,
        compiler_config: Any = None,
        tensorflow_version: str | None = None,
        **kwargs: Any,
    ) -> None:
        config = as_trcomp_config(compiler_config)
        if tensorflow_version is not None and (image_uri is None or (config and config.enabled)):
            why = (
                "its image has no TensorFlow"
                if image_uri is None
                else "compiler_config cannot compile TensorFlow"
            )
            raise UnsupportedJobError(
                f"tensorflow_version={tensorflow_version!r}: trcomp compiles PyTorch only "
                f"({why}), and the job would silently become a PyTorch job. "
                "Pass pytorch_version= instead, or use sagemaker.huggingface.HuggingFace "
                "without compiler_config for TensorFlow."
            )
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
        image = self._trcomp_prepare(config, image_uri, kwargs)
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


class Estimator(_CompilerMixin, sagemaker.estimator.Estimator):  # type: ignore[misc]
    """``sagemaker.estimator.Estimator`` (bring your own image) with ``compiler_config=``.

    ``image_uri`` defaults to trcomp's image; pass your own image built
    ``FROM`` it (or with trcomp installed and ``SAGEMAKER_TRAINING_MODULE`` set).
    """

    def __init__(
        self,
        image_uri: str | None = None,
        compiler_config: Any = None,
        distribution: dict[str, Any] | None = None,
        **kwargs: Any,
    ) -> None:
        image = self._trcomp_prepare(compiler_config, image_uri, kwargs)
        super().__init__(image_uri=image, **kwargs)
        self._trcomp_finish(distribution)

    def _trcomp_compiler_hyperparameters(self) -> dict[str, str]:
        # The SDK's plain Estimator knows no compiler_config: this is its one writer.
        return {} if self._trcomp_config is None else self._trcomp_config.to_hyperparameters()
