"""SageMaker sessions that work offline: local mode and process mode need no AWS.

The SageMaker SDK v2 sends telemetry on every ``fit()`` and needs a region even
in local mode. These sessions set a region (``AWS_REGION``/``AWS_DEFAULT_REGION``
or ``us-east-1``), opt out of telemetry, and use local code instead of S3.
"""

from __future__ import annotations

import os
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from sagemaker.local import LocalSession

__all__ = [
    "DEFAULT_REGION",
    "TELEMETRY_OPT_OUT",
    "local_session",
    "offline_region",
    "quiet_sagemaker",
]

DEFAULT_REGION = "us-east-1"
TELEMETRY_OPT_OUT: dict[str, Any] = {
    "SchemaVersion": "1.0",
    "SageMaker": {"PythonSDK": {"Modules": {"TelemetryOptOut": True}}},
}


def quiet_sagemaker() -> None:
    """Silence the SDK's v2 deprecation banner; call before importing sagemaker."""
    os.environ.setdefault("SAGEMAKER_SUPPRESS_V2_WARNING", "1")


def offline_region() -> str:
    """The region local jobs pretend to be in: the configured one, else us-east-1."""
    return os.environ.get("AWS_REGION") or os.environ.get("AWS_DEFAULT_REGION") or DEFAULT_REGION


def local_session(region: str | None = None) -> LocalSession:
    """A SageMaker ``LocalSession`` for local mode that needs no AWS account.

    Code is mounted from the source directory (``local_code``), so nothing goes
    to S3; use ``file://`` inputs and ``output_path``.
    """
    quiet_sagemaker()
    import boto3
    from sagemaker.local import LocalSession

    boto_session = boto3.Session(region_name=region or offline_region())
    session = LocalSession(boto_session=boto_session)
    _validate_opt_out_once()
    session.sagemaker_config = TELEMETRY_OPT_OUT
    session.config = {"local": {"local_code": True}}
    return session


def _validate_opt_out_once() -> None:
    """Validate our opt-out config once instead of on every SDK lookup.

    The SDK re-validates a session's config against its whole JSON schema on every
    config lookup (about a second each here, a dozen lookups per estimator). Our
    config is a constant: validate it for real once, then let that object through.
    Any other config is still validated by the SDK as before.
    """
    import sagemaker.utils

    current = sagemaker.utils.validate_sagemaker_config
    if getattr(current, "trcomp_fast_path", False):
        return
    current(TELEMETRY_OPT_OUT)

    def validate(sagemaker_config: dict[str, Any] | None = None) -> None:
        if sagemaker_config is not TELEMETRY_OPT_OUT:
            current(sagemaker_config)  # type: ignore[arg-type]

    validate.trcomp_fast_path = True  # type: ignore[attr-defined]
    sagemaker.utils.validate_sagemaker_config = validate
