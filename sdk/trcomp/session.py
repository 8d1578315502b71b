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

    from trcomp._sdk_compat import validate_config_once

    boto_session = boto3.Session(region_name=region or offline_region())
    session = LocalSession(boto_session=boto_session)
    validate_config_once(TELEMETRY_OPT_OUT)
    session.sagemaker_config = TELEMETRY_OPT_OUT
    session.config = {"local": {"local_code": True}}
    return session
