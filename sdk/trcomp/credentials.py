"""The caller's AWS credentials never travel with a job: the one check, for SDK v2 and v3.

SageMaker stores a job's hyperparameters and environment in clear text
(DescribeTrainingJob returns them). Both the v2 estimators (:mod:`trcomp.remote`)
and :class:`trcomp.v3.ModelTrainer` call :func:`check_no_credentials` before
anything is uploaded or submitted. Imports neither SDK, so both environments use it.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from trcomp.contract.errors import TrcompError

__all__ = ["CredentialLeakError", "check_no_credentials", "credential_values"]

# Names that must never be sent as a job's environment or hyperparameters.
_CREDENTIAL_NAMES = frozenset(
    {"aws_access_key_id", "aws_secret_access_key", "aws_session_token", "aws_security_token"}
)


class CredentialLeakError(TrcompError):
    """A job would carry the caller's AWS credentials in its hyperparameters or environment."""


def credential_values(session: Any) -> list[str]:
    """The access key id, secret key and session token of ``session.boto_session``.

    ``session`` is a SageMaker session (v2 or v3); none found: an empty list.
    """
    boto_session = getattr(session, "boto_session", None)
    credentials = boto_session.get_credentials() if boto_session is not None else None
    if credentials is None:
        return []
    frozen = credentials.get_frozen_credentials()
    # Custom credential providers and test doubles may hold other objects than str:
    # only text can be found in (and leak through) hyperparameters and environment.
    values = (frozen.access_key, frozen.secret_key, frozen.token)
    return [v for v in values if isinstance(v, str) and len(v) >= 8]


def check_no_credentials(
    hyperparameters: Mapping[str, Any], environment: Mapping[str, Any], secrets: list[str]
) -> None:
    """Raise :class:`CredentialLeakError` if a job would carry AWS credentials.

    Looks for the credential variable names as keys and for the values in ``secrets``
    (the caller's access key id, secret key and session token) inside any value. The
    error names the key, never the value.
    """
    for where, mapping in (
        ("hyperparameter", hyperparameters),
        ("environment variable", environment),
    ):
        for key, value in mapping.items():
            text = str(value)
            if str(key).lower() in _CREDENTIAL_NAMES or any(s in text for s in secrets):
                raise CredentialLeakError(
                    f"{where} {key!r} holds AWS credentials; SageMaker stores hyperparameters "
                    "and environment in clear text (DescribeTrainingJob shows them). Remove it: "
                    "the job gets its AWS access from its execution role (role=)."
                )
