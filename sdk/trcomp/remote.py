"""Submitting jobs to SageMaker: the session, what a remote job gets by default, AWS errors.

Three things happen between ``estimator.fit()`` and SageMaker's CreateTrainingJob:

- :class:`RemoteSession` is the estimators' default session. It is the SDK's
  ``sagemaker.Session`` except that STS calls honour the endpoint configured for
  boto3 (``AWS_ENDPOINT_URL_STS``, ``AWS_ENDPOINT_URL`` or ``endpoint_url`` in
  ``~/.aws/config``); the SDK always calls the public regional STS endpoint,
  which breaks VPC endpoints without internet, emulators and test doubles.
- :func:`prepare_remote_job` refuses a job whose hyperparameters or environment
  carry the caller's AWS credentials, and completes the job's spec with the
  default checkpoint location when the compiler cache is on (see docs/remote.md,
  :func:`default_checkpoint_uri`); :func:`remote_view` is what the SDK's
  ``fit()`` then reads (the estimator's own attributes are left as they are).
- :func:`remote_errors` re-raises AWS errors unchanged in type (``ClientError``
  and friends), with what trcomp knows about the job added as a note.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any
from urllib.parse import urlparse

from trcomp.checkpoints import (
    CHECKPOINT_PREFIX,
    checkpoint_environment,
    default_checkpoint_location,
)
from trcomp.credentials import CredentialLeakError, check_no_credentials, credential_values
from trcomp.jobspec import JobSpec, SdkView
from trcomp.session import quiet_sagemaker
from trcomp.shared_cache_checks import check_shared_cache

if TYPE_CHECKING:
    from sagemaker.estimator import EstimatorBase

quiet_sagemaker()

import sagemaker  # noqa: E402
from sagemaker.utils import sts_regional_endpoint  # noqa: E402

__all__ = [
    "CHECKPOINT_PREFIX",
    "CredentialLeakError",
    "RemoteSession",
    "check_no_credentials",
    "default_checkpoint_uri",
    "describe_job",
    "error_code",
    "prepare_remote_job",
    "remote_errors",
    "remote_session",
    "remote_view",
    "sts_client",
]

logger = logging.getLogger("trcomp")

_AWS_DOMAINS = (".amazonaws.com", ".amazonaws.com.cn", ".api.aws")


# -- session -------------------------------------------------------------------------


def sts_client(boto_session: Any, config: Any = None) -> Any:
    """An STS client for ``boto_session``'s region that honours a configured endpoint.

    With no endpoint configured this is the regional endpoint the SageMaker SDK uses.
    ``config`` is an optional ``botocore.config.Config`` (timeouts, retries).
    """
    region = boto_session.region_name
    client = boto_session.client("sts", region_name=region, config=config)
    host = urlparse(client.meta.endpoint_url).hostname or ""
    if host.endswith(_AWS_DOMAINS):
        client = boto_session.client(
            "sts", region_name=region, endpoint_url=sts_regional_endpoint(region), config=config
        )
    return client


class RemoteSession(sagemaker.Session):
    """``sagemaker.Session`` whose STS calls (account, default bucket) honour boto3's endpoint."""

    def account_id(self) -> str:
        """The caller's AWS account id (STS GetCallerIdentity)."""
        return str(sts_client(self.boto_session).get_caller_identity()["Account"])

    def default_bucket(self) -> str:
        """``sagemaker-{region}-{account}`` (created if missing) unless a bucket was configured."""
        from trcomp._sdk_compat import default_bucket

        def generated() -> str:
            return f"sagemaker-{self.boto_region_name}-{self.account_id()}"

        return default_bucket(self, generated)


def remote_session(boto_session: Any = None, **kwargs: Any) -> RemoteSession:
    """The session a remote estimator gets when none is passed (keyword args go to the SDK)."""
    return RemoteSession(boto_session=boto_session, **kwargs)


# -- what a job gets -----------------------------------------------------------------


def default_checkpoint_uri(spec: JobSpec, session: sagemaker.Session) -> str | None:
    """Where a job's ``/opt/ml/checkpoints`` (and so its compile cache) is kept in S3.

    ``None`` when the compiler or its cache is off, or the user set
    ``checkpoint_s3_uri``. Otherwise ``s3://<default bucket>/[<default prefix>/]``
    ``trcomp-checkpoints/[<base_job_name>/]<entry point stem>/``: stable across jobs
    of the same script, so the next job starts with a warm cache.
    Calls S3 and STS (the default bucket), so it runs at ``fit()``, never earlier.
    """
    config = spec.compiler_config
    if config is None or not config.enabled or not config.cache:
        return None
    if spec.checkpoint_s3_uri:
        return None
    return default_checkpoint_location(
        session.default_bucket(),
        getattr(session, "default_bucket_prefix", None),
        spec.base_job_name,
        spec.entry_point,
    )


def prepare_remote_job(spec: JobSpec, estimator: EstimatorBase) -> JobSpec:
    """Check a job before it is submitted to SageMaker; return its spec as submitted.

    Refuses credentials in hyperparameters and environment, then sets the default
    ``checkpoint_s3_uri`` (:func:`default_checkpoint_uri`) in the returned spec
    when the cache is on. ``estimator`` gives its hyperparameters and session.
    """
    session = estimator.sagemaker_session
    check_no_credentials(estimator.hyperparameters(), spec.environment, credential_values(session))
    check_shared_cache(
        spec.compiler_config,
        mode="remote",
        boto_session=session.boto_session,
        environment=spec.environment,
        hyperparameters=estimator.hyperparameters(),
    )
    uri = default_checkpoint_uri(spec, session)
    if uri is None:
        return spec
    logger.info("trcomp: compile cache kept at checkpoint_s3_uri=%s", uri)
    return spec.model_copy(update={"checkpoint_s3_uri": uri})


def remote_view(spec: JobSpec) -> SdkView:
    """What the SDK's ``fit()`` reads for a submitted job: its checkpoint location, and
    ``TRCOMP_CHECKPOINT_DIR`` for a custom ``checkpoint_local_path``."""
    return SdkView(
        checkpoint_s3_uri=spec.checkpoint_s3_uri,
        checkpoint_local_path=spec.checkpoint_local_path,
        output_path=spec.output_path,
        extra_environment=checkpoint_environment(spec.checkpoint_local_path),
    )


# -- errors --------------------------------------------------------------------------

_ACCESS_DENIED = frozenset({"AccessDenied", "AccessDeniedException"})
_HINTS = {
    "ResourceLimitExceeded": "the account's quota for this instance type is used up: request "
    "an increase in Service Quotas (SageMaker, '<instance type> for training job usage') or "
    "pick another instance type",
    "ResourceInUse": "a job with this name exists already: pass another job_name",
    "ThrottlingException": "too many requests: retry later",
    "ExpiredToken": "the session token expired: refresh your credentials (aws sso login, ...)",
    "ExpiredTokenException": "the session token expired: refresh your credentials",
    "UnrecognizedClientException": "AWS does not know these credentials: check AWS_PROFILE "
    "and the access key",
    "InvalidClientTokenId": "AWS does not know these credentials: check AWS_PROFILE and the "
    "access key",
    "NoSuchBucket": "the bucket does not exist: create it or pass another S3 location",
}


def error_code(error: Mapping[str, Any], status: int | None) -> str:
    """The AWS error code; an HTTP status alone (an XML body botocore could not parse) is mapped."""
    code = str(error.get("Code", ""))
    if code.isdigit() or not code:
        found = re.search(r"<Code>(\w+)</Code>", str(error.get("Message", "")))
        if found:
            return found.group(1)
        if (status or (int(code) if code.isdigit() else 0)) == 403:
            return "AccessDenied"
    return code


def _validation_hint(message: str) -> str:
    lowered = message.lower()
    if "role" in lowered or "assume" in lowered:
        return (
            "SageMaker cannot use the role: pass role= the ARN of an existing IAM role that "
            "trusts sagemaker.amazonaws.com"
        )
    if "image" in lowered or "ecr" in lowered:
        return (
            "SageMaker cannot pull the image: push it to this account and region with "
            "`trcomp image push --region R --account A`, or pass image_uri="
        )
    if "instance" in lowered:
        return "SageMaker does not offer this instance type for training in this region"
    return "SageMaker refused the request: the message above names the field"


def _hint(code: str, message: str, operation: str) -> str:
    if code == "ValidationException":
        return _validation_hint(message)
    if code in _ACCESS_DENIED:
        if operation == "CreateTrainingJob":
            return (
                "your credentials may not create training jobs: allow "
                "sagemaker:CreateTrainingJob, and iam:PassRole on the job's role"
            )
        return (
            f"your credentials may not call {operation or 'this'}: check their IAM policy "
            "(s3:PutObject/GetObject on the buckets, or pass code_location=/output_path= "
            "to a bucket you may use)"
        )
    return _HINTS.get(code, "see the AWS error above")


def describe_job(spec: JobSpec, estimator: EstimatorBase) -> str:
    """One line naming the job being submitted: class, instances, role, image, region."""
    session = getattr(estimator, "sagemaker_session", None)
    region = getattr(session, "boto_region_name", None) or "?"
    image = spec.image_uri or "trcomp's (not resolved yet)"
    return (
        f"{type(estimator).__name__} job on {spec.instance_count} x {spec.instance_type or '?'} "
        f"in {region}, role {getattr(estimator, 'role', '?')}, image {image}"
    )


def _add_note(exc: BaseException, note: str) -> None:
    if hasattr(exc, "add_note"):  # Python 3.11+
        exc.add_note(note)
    else:  # pragma: no cover - Python 3.10
        logger.error("%s", note)


@contextmanager
def remote_errors(describe: Callable[[], str]) -> Iterator[None]:
    """Re-raise AWS errors unchanged in type, with the job and the next step added as a note.

    ``describe`` names the job (:func:`describe_job`); it is called once an error came.
    """
    from boto3.exceptions import S3UploadFailedError
    from botocore.exceptions import ClientError, NoCredentialsError, NoRegionError

    try:
        yield
    except ClientError as exc:
        error = exc.response.get("Error", {})
        status = exc.response.get("ResponseMetadata", {}).get("HTTPStatusCode")
        code = error_code(error, status)
        _add_note(
            exc,
            f"trcomp: {exc.operation_name} failed with {code} (HTTP {status or '?'}) while "
            f"submitting {describe()}: "
            f"{_hint(code, str(error.get('Message', '')), exc.operation_name)}",
        )
        raise
    except S3UploadFailedError as exc:
        code = "AccessDenied" if "AccessDenied" in str(exc) else ""
        _add_note(
            exc,
            f"trcomp: uploading the source directory to S3 failed while submitting "
            f"{describe()}: {_hint(code, str(exc), 'PutObject')}",
        )
        raise
    except (NoCredentialsError, NoRegionError) as exc:
        _add_note(
            exc,
            "trcomp: remote jobs need AWS credentials and a region: run `aws configure` or "
            "set AWS_PROFILE / AWS_REGION; for a job on this machine use "
            "instance_type='local_process' or 'local'",
        )
        raise
