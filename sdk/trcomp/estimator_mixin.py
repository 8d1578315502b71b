"""What trcomp's three v2 estimators share: ``_CompilerMixin``, the config conversion.

``trcomp.estimators`` puts the mixin before the SageMaker class in each
estimator's MRO. The mixin validates the compiler config in the constructor,
describes the estimator as a :class:`~trcomp.jobspec.JobSpec` (:meth:`job_spec`),
picks trcomp's image, and hands ``fit()`` to the run mode the spec names.
Imported by ``trcomp.estimators`` after it has checked that the SageMaker SDK v2
is installed.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Any, cast

from trcomp.caller import warn_at_caller
from trcomp.config import TrainingCompilerConfig
from trcomp.contract.distribution import (
    distribution_hyperparameters,
    enabled_distributions,
)
from trcomp.contract.errors import (
    CompilerConfigError,
    CompilerConfigWarning,
)
from trcomp.contract.instances import (
    DOCKER_LOCAL_MODES,
    PROCESS_MODE,
    gpu_count,
    single_process_warning,
)
from trcomp.contract.keys import CONFIG_KEY, DEBUG_KEY, ENABLED_KEY
from trcomp.contract.limits import check_limits
from trcomp.contract.metrics import metric_definitions
from trcomp.image.uris import (
    DEFERRED_IMAGE,
    check_versions,
    device_for_instance,
    local_image_uri,
    remote_image_uri,
    versions_from_image,
)
from trcomp.jobspec import JobSpec
from trcomp.validation import validate_job

if TYPE_CHECKING:
    from sagemaker.estimator import EstimatorBase

    from trcomp.local.process import ProcessJob

__all__ = ["as_trcomp_config"]

logger = logging.getLogger("trcomp")


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
        self,
        compiler_config: Any,
        image_uri: str | None,
        kwargs: dict[str, Any],
        torch_version: str | None = None,
    ) -> str:
        """Adjust constructor arguments before the SageMaker class sees them.

        Returns the image URI to hand to the SageMaker constructor; ``torch_version``
        picks the local image's tag (None: the default version's).
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
            return local_image_uri(torch_version)
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
            framework_version=self._trcomp_torch_version(),
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
        """``attach()``: the SDK's parameters plus the job's compiler config and versions.

        A job that ran on one of trcomp's images gets the versions read from its tag.
        A job that ran on any other image (an AWS framework image, or the old Training
        Compiler's) keeps that image, with the versions the SDK read from its tag, as
        the SDK's own class attaches it: those versions describe the job that ran,
        not a new job on trcomp's image, so they are not checked against trcomp's.
        The compiler hyperparameters become ``compiler_config``, except for a job
        :meth:`_trcomp_compiled_by_its_image` (the old compiler's TensorFlow jobs).
        """
        params: dict[str, Any] = super()._prepare_init_params_from_job_description(  # type: ignore[misc]
            job_details, model_channel_name
        )
        hyperparameters = params.get("hyperparameters") or {}
        compiler_keys = any(key in hyperparameters for key in (ENABLED_KEY, DEBUG_KEY, CONFIG_KEY))
        if compiler_keys and not cls._trcomp_compiled_by_its_image(params):
            params["compiler_config"] = TrainingCompilerConfig.from_hyperparameters(hyperparameters)
            for key in (ENABLED_KEY, DEBUG_KEY, CONFIG_KEY):
                hyperparameters.pop(key, None)
        image = (job_details.get("AlgorithmSpecification") or {}).get("TrainingImage")
        versions = versions_from_image(image)
        if versions is not None:
            cls._trcomp_attach_versions(params, versions.torch, versions.python)
        elif image:
            # The SDK drops an image it recognises and would pick it again from the
            # versions; trcomp would pick its own image for them, or refuse them.
            params["image_uri"] = image
        return params

    @classmethod
    def _trcomp_attach_versions(cls, params: dict[str, Any], torch: str, python: str) -> None:
        """Put the versions read from our image's tag where this class's constructor wants them."""

    @classmethod
    def _trcomp_compiled_by_its_image(cls, params: dict[str, Any]) -> bool:
        """Whether an attached job's compiler hyperparameters belong to its own image.

        True for a job trcomp's compiler cannot have run (the old Training Compiler's
        TensorFlow jobs): its compiler hyperparameters stay hyperparameters, passed on
        to that image as they were, and ``compiler_config`` stays None.
        """
        return False

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
