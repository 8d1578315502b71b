"""Context for errors that AWS returns when a job is submitted to SageMaker."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

__all__ = ["remote_errors"]

_HINTS = {
    "AccessDeniedException": "the caller may not create training jobs or pass this role: "
    "check the IAM policy of your credentials (sagemaker:CreateTrainingJob, iam:PassRole)",
    "AccessDenied": "the caller may not use this bucket: check the IAM policy of your credentials",
    "ValidationException": "SageMaker refused the request: check role ARN, instance type and "
    "image URI (push the image with `trcomp image push`)",
    "ResourceLimitExceeded": "the account's quota for this instance type is used up: request "
    "a quota increase in Service Quotas or pick another instance type",
    "ThrottlingException": "too many requests: retry later",
}


@contextmanager
def remote_errors(estimator: Any) -> Iterator[None]:
    """Re-raise AWS errors unchanged in type, with what trcomp knows added as a note."""
    from botocore.exceptions import ClientError

    try:
        yield
    except ClientError as exc:
        code = exc.response.get("Error", {}).get("Code", "")
        hint = _HINTS.get(code, "see the AWS error above")
        exc.add_note(
            f"trcomp: submitting {type(estimator).__name__} job on "
            f"{getattr(estimator, 'instance_type', '?')} with image "
            f"{estimator.__dict__.get('_trcomp_image')}: {hint}"
        )
        raise
