"""Estimators that take ``compiler_config=``: ``PyTorch``, ``HuggingFace``, ``Estimator``.

They are the SageMaker SDK v2 classes with three changes: the compiler config is
validated in the constructor (nothing is uploaded before that), its
hyperparameters and metric definitions are merged into the job, and the image
defaults to trcomp's. ``instance_type="local_process"`` runs the job on this
machine without Docker (see docs/local-mode.md).

Each estimator describes itself as one :class:`~trcomp.jobspec.JobSpec`
(:meth:`job_spec`) when a job is prepared: in the constructor for the compiler
checks, and at every ``fit()`` for the run mode (process, Docker local mode,
SageMaker), which reads the spec, not the estimator. ``fit()`` leaves the
estimator's attributes as they were.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Any, cast

from trcomp.session import quiet_sagemaker

quiet_sagemaker()

try:
    import sagemaker.estimator
    import sagemaker.huggingface
    import sagemaker.pytorch
except ImportError as _missing:  # a v3 environment, or no SDK at all
    from trcomp.sdk_check import wrong_sdk_message

    raise ImportError(wrong_sdk_message("v2", _missing)) from None

from trcomp.caller import warn_at_caller  # noqa: E402
from trcomp.config import TrainingCompilerConfig  # noqa: E402
from trcomp.contract.distribution import (  # noqa: E402
    distribution_hyperparameters,
    enabled_distributions,
)
from trcomp.contract.errors import (  # noqa: E402
    CompilerConfigError,
    CompilerConfigWarning,
    UnsupportedJobError,
)
from trcomp.contract.instances import (  # noqa: E402
    DOCKER_LOCAL_MODES,
    PROCESS_MODE,
    gpu_count,
    single_process_warning,
)
from trcomp.contract.keys import CONFIG_KEY, DEBUG_KEY, ENABLED_KEY  # noqa: E402
from trcomp.contract.limits import check_limits  # noqa: E402
from trcomp.contract.metrics import metric_definitions  # noqa: E402
from trcomp.image.uris import (  # noqa: E402
    DEFAULT_FRAMEWORK_VERSION,
    DEFAULT_PY_VERSION,
    DEFERRED_IMAGE,
    check_versions,
    device_for_instance,
    local_image_uri,
    remote_image_uri,
    versions_from_image,
)
from trcomp.jobspec import JobSpec  # noqa: E402
from trcomp.validation import validate_job  # noqa: E402

if TYPE_CHECKING:
    from sagemaker.estimator import EstimatorBase

    from trcomp.local.process import ProcessJob

__all__ = ["PROCESS_MODE", "Estimator", "HuggingFace", "PyTorch", "as_trcomp_config"]

logger = logging.getLogger("trcomp")

DEFAULT_TRANSFORMERS_VERSION = "4.57"


def as_trcomp_config(config: Any) -> TrainingCompilerConfig | None:
    """Accept our config, the AWS SDK's ``TrainingCompilerConfig`` (converted), or None."""
    if config is None or isinstance(config, TrainingCompilerConfig):
        return config
    if type(config).__module__.startswith("sagemaker.") and hasattr(config, "enabled"):
        converted = TrainingCompilerConfig(
            enabled=bool(config.enabled), debug=bool(getattr(config, "debug", False))
        )
        logger.info(
            "converted %s.%s(enabled=%s, debug=%s) to trcomp.TrainingCompilerConfig; "
            "import TrainingCompilerConfig from trcomp to use its other options",
            type(config).__module__,
            type(config).__name__,
            converted.enabled,
            converted.debug,
        )
        return converted
    raise CompilerConfigError(
        f"compiler_config must be a trcomp.TrainingCompilerConfig, got {type(config).__name__}: "
        "build it with trcomp.TrainingCompilerConfig(...)"
    )


def _warn_single_process(spec: JobSpec) -> None:
    """Warn when a multi-GPU instance would run one process (one GPU) for lack of a distribution.

    The jax engine is the exception: its one process drives every GPU of the host.
    """
    instance_type = spec.instance_type
    gpus = gpu_count(instance_type)
    if gpus is None or gpus < 2 or enabled_distributions(spec.distribution):
        return
    config = spec.compiler_config
    jax_engine = config is not None and config.enabled and config.backend == "xla"
    if jax_engine and config is not None and config.engine_for(nvidia_gpu=True) == "jax":
        return
    message = single_process_warning(instance_type, gpus)
    warn_at_caller(message, CompilerConfigWarning)
    logger.warning(message)


class _CompilerMixin:
    """What the three estimators share; it sits before the SageMaker class in the MRO."""

    _trcomp_config: TrainingCompilerConfig | None
    _trcomp_image_is_default: bool
    _trcomp_image: str | None
    # The framework of the SageMaker SDK's inference images (None: bring your own).
    _trcomp_framework: str | None = None

    def _trcomp_prepare(
        self, compiler_config: Any, image_uri: str | None, kwargs: dict[str, Any]
    ) -> str:
        """Adjust constructor arguments before the SageMaker class sees them.

        Returns the image URI to hand to the SageMaker constructor.
        """
        config = as_trcomp_config(compiler_config)
        self._trcomp_config = config
        self._trcomp_image_is_default = image_uri is None
        instance_type = kwargs.get("instance_type")
        if config is not None and config.enabled:
            # Debugger and profiler hooks make compilers recompile; off unless asked for.
            kwargs.setdefault("debugger_hook_config", False)
            kwargs.setdefault("disable_profiler", True)
            user_metrics = list(kwargs.get("metric_definitions") or [])
            names = {m["Name"] for m in user_metrics}
            kwargs["metric_definitions"] = user_metrics + [
                m for m in metric_definitions() if m["Name"] not in names
            ]
        if kwargs.get("sagemaker_session") is None and instance_type in (
            *DOCKER_LOCAL_MODES,
            PROCESS_MODE,
        ):
            from trcomp.session import local_session

            kwargs["sagemaker_session"] = local_session()
        elif kwargs.get("sagemaker_session") is None:
            # The SDK's Session, with STS calls that honour boto3's endpoint settings.
            from trcomp.remote import remote_session

            kwargs["sagemaker_session"] = remote_session()
        if image_uri is not None:
            return image_uri
        if instance_type in (*DOCKER_LOCAL_MODES, PROCESS_MODE):
            return local_image_uri()
        return DEFERRED_IMAGE

    def _trcomp_finish(self, distribution: dict[str, Any] | None) -> None:
        """Validate once the SageMaker constructor has set every attribute."""
        # The SDK rewrites pytorchddp to smdistributed and refuses pytorchxla without
        # its own config class; we keep the user's choice and launch it ourselves.
        self.distribution = dict(distribution or {})
        # Our config has the same _to_hyperparameter_dict() as the AWS one, so the
        # SDK's Framework.hyperparameters() writes its hyperparameters as it writes
        # theirs; the plain Estimator writes them itself (_trcomp_compiler_hyperparameters).
        self.compiler_config = self._trcomp_config
        spec = self.job_spec()
        if self._trcomp_config is not None:
            validate_job(self._trcomp_config, spec)
        _warn_single_process(spec)

    # -- the job spec -----------------------------------------------------------------

    def job_spec(self) -> JobSpec:
        """This estimator's job as trcomp's checks and run modes read it (no network call).

        Built from the estimator's current attributes; trcomp's default SageMaker
        image is left out (``image_uri=None``) until it is resolved at ``fit()``.
        """
        image = self.__dict__.get("_trcomp_image")
        return JobSpec.from_estimator(
            cast("EstimatorBase", self),
            compiler_config=self._trcomp_config,
            image_uri=None if image == DEFERRED_IMAGE else image,
            image_is_default=self._trcomp_image_is_default,
        )

    @property
    def latest_job_spec(self) -> JobSpec | None:
        """The spec of the latest ``fit()``, as submitted (trcomp's default
        ``checkpoint_s3_uri`` included); None before the first."""
        spec: JobSpec | None = self.__dict__.get("_trcomp_latest_spec")
        return spec

    # -- image ----------------------------------------------------------------

    @property
    def image_uri(self) -> str | None:
        """The job's image: the one passed in, else trcomp's (resolved on first use)."""
        image = self.__dict__.get("_trcomp_image")
        if image != DEFERRED_IMAGE:
            return image
        session = self.sagemaker_session  # type: ignore[attr-defined]
        region = session.boto_region_name
        account = session.account_id()
        torch = check_versions(self._trcomp_torch_version(), None).torch
        device = device_for_instance(getattr(self, "instance_type", None))
        resolved = remote_image_uri(region, account, torch, device)
        self.__dict__["_trcomp_image"] = resolved
        return resolved

    @image_uri.setter
    def image_uri(self, value: str | None) -> None:
        self.__dict__["_trcomp_image"] = value

    def _trcomp_torch_version(self) -> str | None:
        """The torch version the job asks for (None: the default)."""
        return getattr(self, "framework_version", None)

    def training_image_uri(self, region: str | None = None) -> str:
        """The image the job runs in (SageMaker calls this when it submits)."""
        image = self.image_uri
        assert image is not None
        return image

    # -- models and attach -------------------------------------------------------------

    def create_model(self, *args: Any, **kwargs: Any) -> Any:
        """The SDK's model, served by the SDK's inference image, never trcomp's training image.

        Without ``image_uri=`` the model gets the SageMaker inference image for the
        estimator's framework and versions (resolved by the SDK at deploy time, for
        the endpoint's instance type); when the SDK has none, an
        :class:`~trcomp.contract.errors.UnsupportedJobError` says which image to pass.
        ``deploy()`` calls this first, so nothing is created before the check.
        """
        if kwargs.get("image_uri") is None:
            from trcomp.serving import check_inference_image

            image = self.__dict__.get("_trcomp_image")
            shown = "trcomp's training image" if image == DEFERRED_IMAGE else str(image)
            check_inference_image(cast("EstimatorBase", self), self._trcomp_framework, shown)
            kwargs["image_uri"] = None
        return super().create_model(*args, **kwargs)  # type: ignore[misc]

    @classmethod
    def _prepare_init_params_from_job_description(
        cls, job_details: dict[str, Any], model_channel_name: str | None = None
    ) -> dict[str, Any]:
        """``attach()``: the SDK's parameters plus the job's compiler config and versions."""
        params: dict[str, Any] = super()._prepare_init_params_from_job_description(  # type: ignore[misc]
            job_details, model_channel_name
        )
        hyperparameters = params.get("hyperparameters") or {}
        if any(key in hyperparameters for key in (ENABLED_KEY, DEBUG_KEY, CONFIG_KEY)):
            params["compiler_config"] = TrainingCompilerConfig.from_hyperparameters(hyperparameters)
            for key in (ENABLED_KEY, DEBUG_KEY, CONFIG_KEY):
                hyperparameters.pop(key, None)
        versions = versions_from_image(params.get("image_uri"))
        if versions is not None:
            cls._trcomp_attach_versions(params, versions.torch, versions.python)
        return params

    @classmethod
    def _trcomp_attach_versions(cls, params: dict[str, Any], torch: str, python: str) -> None:
        """Put the versions read from our image's tag where this class's constructor wants them."""

    # -- hyperparameters ----------------------------------------------------------

    def hyperparameters(self) -> dict[str, str]:
        """The job's hyperparameters, the compiler's included, within SageMaker's limits."""
        encoded: dict[str, str] = super().hyperparameters()  # type: ignore[misc]
        encoded.update(
            distribution_hyperparameters(
                getattr(self, "distribution", None), getattr(self, "instance_type", None)
            )
        )
        encoded.update(self._trcomp_compiler_hyperparameters())
        if self._trcomp_config is not None:
            compiler_keys = (ENABLED_KEY, DEBUG_KEY, CONFIG_KEY)
            compiler = {key: encoded[key] for key in compiler_keys if key in encoded}
            check_limits(compiler, what="the compiler config")
        check_limits(encoded)
        return encoded

    def _trcomp_compiler_hyperparameters(self) -> dict[str, str]:
        """The compiler hyperparameters this class writes itself.

        None: the SDK's framework estimators write them from ``compiler_config``.
        """
        return {}

    def _trcomp_record_process_job(self, job: ProcessJob) -> None:
        self.__dict__["_trcomp_process_job"] = job

    @property
    def model_data(self) -> Any:
        """Where the model is: ``model.tar.gz`` of the last ``fit()``."""
        job = self.__dict__.get("_trcomp_process_job")
        if job is not None:
            return job.model_data
        return super().model_data  # type: ignore[misc]

    # -- running ------------------------------------------------------------------

    def fit(
        self,
        inputs: Any = None,
        wait: bool = True,
        logs: Any = "All",
        job_name: str | None = None,
        **kwargs: Any,
    ) -> Any:
        """Run the job: SageMaker, Docker local mode, or process mode (``local_process``).

        The run mode reads this estimator's :meth:`job_spec`; the estimator's
        attributes are the same after ``fit()`` as before.
        """
        spec = self.job_spec()
        self.__dict__["_trcomp_latest_spec"] = spec
        # Every subclass is an SDK EstimatorBase; mypy sees the mixin alone.
        estimator = cast("EstimatorBase", self)
        if spec.instance_type == PROCESS_MODE:
            from trcomp.local.process import run_process_job

            return run_process_job(
                spec,
                estimator,
                inputs,
                job_name=job_name,
                logs=logs,
                wait=wait,
                on_packed=self._trcomp_record_process_job,
            )
        parent_fit = super().fit  # type: ignore[misc]
        if spec.instance_type in DOCKER_LOCAL_MODES:
            from trcomp.local.docker import docker_job

            with (
                docker_job(spec, estimator, inputs, job_name) as (name, view),
                view.given_to(estimator),
            ):
                return parent_fit(inputs, wait=wait, logs=logs, job_name=name, **kwargs)
        from trcomp.remote import describe_job, prepare_remote_job, remote_errors, remote_view

        with remote_errors(lambda: describe_job(self.job_spec(), estimator)):
            # Refuses leaked credentials; the default checkpoint_s3_uri.
            submitted = prepare_remote_job(spec, estimator)
            self.__dict__["_trcomp_latest_spec"] = submitted
            with remote_view(submitted).given_to(estimator):
                return parent_fit(inputs, wait=wait, logs=logs, job_name=job_name, **kwargs)


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
            check_versions(pytorch_version, py_version, argument="pytorch_version")
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
