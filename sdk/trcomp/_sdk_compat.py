"""Every use of the SageMaker SDK v2's private internals, in one module.

trcomp needs a few things the SDK offers no public API for. Each function below
names the private attribute it uses and why; tests/sdk/test_sdk_compat.py checks
each one against the installed SDK (``make test`` on the newest v2,
``make test-sdk-lowest`` on the lowest pyproject allows), so an SDK release that
changes them fails a test instead of a user's job. No other trcomp module reads
or writes a private SDK name (the SDK v3's are in :mod:`trcomp.v3._sdk_compat`);
the test also checks that.

Two hooks are overridden rather than called, because the SDK's design asks
subclasses to provide them: ``_to_hyperparameter_dict`` (the SDK's estimators
call it on ``compiler_config``; :class:`trcomp.TrainingCompilerConfig` has it)
and ``_prepare_init_params_from_job_description`` (``attach()`` calls it;
trcomp's estimators extend it). They are listed in :data:`SDK_HOOKS`.
"""

from __future__ import annotations

import contextlib
import contextvars
import threading
from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from sagemaker.estimator import EstimatorBase

__all__ = [
    "SDK_HOOKS",
    "current_job_name",
    "default_bucket",
    "extra_training_volume",
    "new_job_name",
    "set_current_job_name",
    "validate_config_once",
]

SDK_HOOKS = ("_to_hyperparameter_dict", "_prepare_init_params_from_job_description")
"""Private SDK methods trcomp's classes provide because the SDK calls them."""


def current_job_name(estimator: EstimatorBase) -> str | None:
    """The name of the estimator's latest job (``EstimatorBase._current_job_name``)."""
    name = getattr(estimator, "_current_job_name", None)
    return str(name) if name else None


def set_current_job_name(estimator: EstimatorBase, name: str) -> None:
    """Record a job that ran outside the SDK (process mode) as the estimator's latest.

    The SDK's ``model_data`` and ``create_model()`` read ``_current_job_name``.
    """
    estimator._current_job_name = name  # type: ignore[assignment]  # the SDK annotates it None


def new_job_name(estimator: EstimatorBase, requested: str | None = None) -> str:
    """A job name as ``fit()`` makes one (``EstimatorBase._get_or_create_name``)."""
    return str(estimator._get_or_create_name(requested))


def default_bucket(session: Any, generated_name: Callable[[], str]) -> str:
    """``Session.default_bucket()`` with the name trcomp computes when none is configured.

    The SDK names the bucket from an STS call it makes itself; trcomp's session
    makes that call through boto3's configured endpoint instead. It sets the name
    as a user would (``_default_bucket_name_override``) and then marks the bucket
    as the SDK's own (``_default_bucket_set_by_sdk``), so that uploads still check
    the bucket's owner, as they do for the bucket the SDK names.
    """
    import sagemaker

    if session._default_bucket:
        return str(session._default_bucket)
    generated = not session._default_bucket_name_override
    if generated:
        session._default_bucket_name_override = generated_name()
    bucket = str(sagemaker.Session.default_bucket(session))
    session._default_bucket_set_by_sdk = generated
    return bucket


def _local_image_module() -> Any:
    from sagemaker.local import image

    container = getattr(image, "_SageMakerContainer", None)
    if not hasattr(container, "_prepare_training_volumes") or not hasattr(image, "_Volume"):
        from trcomp.contract.errors import LocalModeError

        raise LocalModeError(
            "this SageMaker SDK's local mode has no _SageMakerContainer._prepare_training_"
            "volumes, so trcomp cannot mount checkpoint_s3_uri: install sagemaker>=2.230,<3 "
            "or leave checkpoint_s3_uri unset in Docker local mode"
        )
    return image


# The extra volumes of the jobs started from this thread (or asyncio task): fit() in
# local mode prepares its containers in the thread that called it.
_EXTRA_VOLUMES: contextvars.ContextVar[tuple[tuple[str, str], ...]] = contextvars.ContextVar(
    "trcomp_extra_training_volumes", default=()
)
_PATCH_LOCK = threading.Lock()
_patch_users = 0
_unpatched: Any = None


@contextlib.contextmanager
def extra_training_volume(host_dir: str, container_dir: str) -> Iterator[None]:
    """Bind-mount ``host_dir`` at ``container_dir`` in local mode's training containers.

    Local mode builds each container's volumes in
    ``_SageMakerContainer._prepare_training_volumes``. While any such block is open
    that method is replaced, once per process, by one that appends the volumes of the
    blocks open in the *calling* context (a :class:`contextvars.ContextVar`). So two
    ``fit()`` calls in two threads each mount their own checkpoint dir, never each
    other's; the last block to close puts the SDK's method back.
    """
    image = _local_image_module()
    token = _EXTRA_VOLUMES.set((*_EXTRA_VOLUMES.get(), (host_dir, container_dir)))
    _patch_volumes(image)
    try:
        yield
    finally:
        _EXTRA_VOLUMES.reset(token)
        _unpatch_volumes(image)


def _patch_volumes(image: Any) -> None:
    global _patch_users, _unpatched
    with _PATCH_LOCK:
        if _patch_users == 0:
            original = image._SageMakerContainer._prepare_training_volumes

            def with_volumes(self: Any, *args: Any, **kwargs: Any) -> list[Any]:
                volumes = list(original(self, *args, **kwargs))
                volumes.extend(image._Volume(h, c) for h, c in _EXTRA_VOLUMES.get())
                return volumes

            _unpatched = original
            image._SageMakerContainer._prepare_training_volumes = with_volumes
        _patch_users += 1


def _unpatch_volumes(image: Any) -> None:
    global _patch_users, _unpatched
    with _PATCH_LOCK:
        _patch_users -= 1
        if _patch_users == 0:
            image._SageMakerContainer._prepare_training_volumes = _unpatched
            _unpatched = None


def validate_config_once(config: dict[str, Any]) -> None:
    """Validate ``config`` for real once, then let the SDK skip re-validating that object.

    The SDK re-validates a session's config against its JSON schema on every
    lookup (``sagemaker.utils.get_sagemaker_config_value`` calls the module's
    ``validate_sagemaker_config``), about a second each here. For this one
    constant object the module function is replaced by one that skips it; any
    other config is still validated.
    """
    import sagemaker.utils

    current = sagemaker.utils.validate_sagemaker_config
    if getattr(current, "trcomp_skips", None) is config:
        return
    current(config)

    def validate(sagemaker_config: dict[str, Any] | None = None) -> None:
        if sagemaker_config is not config:
            current(sagemaker_config)  # type: ignore[arg-type]

    validate.trcomp_skips = config  # type: ignore[attr-defined]
    sagemaker.utils.validate_sagemaker_config = validate
