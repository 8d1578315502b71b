"""Checks of ``TrainingCompilerConfig(shared_cache=...)`` made when a job is started.

Every run mode calls :func:`check_shared_cache` in ``fit()``, before anything
is created or uploaded: an ``s3://`` bucket must be owned by the account of the
credentials the job uses (the caller's: in process mode and Docker local mode
they are the job's too; for a SageMaker job the execution role is of the same
account) and private (the bucket's or the account's Block Public Access); a
``file://`` directory must be writable in process mode, and writable by no one
but this user, under directories only this user or root can change; a SageMaker job's secrets
(the shared cache key, the Redis password) may travel only as Secrets
Manager references, since SageMaker shows a job's environment in clear text.
The container checks the bucket and the directory again with the job's own
credentials, with the same functions (:mod:`trcomp.contract.shared_trust`).
Every AWS call has the job's timeouts (``shared_cache_timeout_s``).
"""

from __future__ import annotations

import base64
import json
import re
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from trcomp.contract.config import TrainingCompilerConfig
from trcomp.contract.errors import LocalModeError, SharedCacheError
from trcomp.contract.owned_dirs import check_directory
from trcomp.contract.shared_cache import (
    KEY_ENV,
    KEY_SECRET_ENV,
    PREVIOUS_KEY_ENV,
    PREVIOUS_KEY_SECRET_ENV,
    REDIS_PASSWORD_ENV,
    REDIS_PASSWORD_SECRET_ENV,
    aws_call_limits,
    check_bucket_owner,
    parse_location,
    refuse_empty_secrets,
    refuse_previous_key_alone,
)
from trcomp.contract.shared_trust import check_bucket_private, refuse_keyless_team_cache
from trcomp.contract.withdrawal import not_before_of

__all__ = ["check_shared_cache"]

_IN_CLEAR = {
    KEY_ENV: KEY_SECRET_ENV,
    PREVIOUS_KEY_ENV: PREVIOUS_KEY_SECRET_ENV,
    REDIS_PASSWORD_ENV: REDIS_PASSWORD_SECRET_ENV,
}
_SECRET_NAMES = (*_IN_CLEAR, *_IN_CLEAR.values())
# What a near name holds (lower case, every run of other characters one "_"): the key's
# or the Redis password's name with any case, prefix or suffix ("my_trcomp_shared_cache_key").
_NEAR = ("shared_cache_key", "trcomp_redis_password")
# A Secrets Manager secret: an ARN, or a name (1-512 of these characters).
_SECRET_ARN = re.compile(r"arn:[a-z-]+:secretsmanager:[a-z0-9-]*:[0-9]*:secret:[A-Za-z0-9/_+=.@-]+")
_SECRET_NAME = re.compile(r"[A-Za-z0-9/_+=.@-]{1,512}")
_SHORTEST = 8  # a secret value shorter than this would be found in unrelated values


def check_shared_cache(
    config: TrainingCompilerConfig | None,
    *,
    mode: str,
    boto_session: Any = None,
    environment: Mapping[str, Any] | None = None,
    hyperparameters: Mapping[str, Any] | None = None,
) -> None:
    """Refuse a shared cache the job could not use, or must not trust.

    ``mode`` is ``"process"``, ``"docker"`` or ``"remote"``; ``boto_session``
    the boto3 session whose credentials the job gets (default: a new one);
    ``environment`` the job's ``environment=``, ``hyperparameters`` its
    ``hyperparameters=``.
    """
    if config is None or not config.enabled or not config.shared_cache:
        return
    location = parse_location(config.shared_cache)
    _check_secrets_placed(environment or {}, hyperparameters or {})
    if mode == "remote":
        for name, reference in _IN_CLEAR.items():
            if name in (environment or {}):
                raise SharedCacheError(
                    f"environment variable {name!r} holds a shared cache secret in clear text; "
                    "SageMaker stores a job's environment as it is sent (DescribeTrainingJob "
                    f"shows it). Store it in AWS Secrets Manager and pass its ARN as {reference}"
                    " instead: the job reads it with its execution role."
                )
    refuse_keyless_team_cache(
        location, environment or {}, insecure=config.shared_cache_insecure,
        where="before the job started",
    )  # fmt: skip
    if location.kind == "file" and mode == "process":
        from trcomp.local.job_checks import check_writable

        check_writable(Path(location.path), "shared_cache")
        check_directory(Path(location.path), where="before the job started")
    elif location.kind == "file" and mode == "docker":
        raise LocalModeError(
            f"shared_cache {location.shown} is a directory of this machine, which Docker local "
            "mode does not mount into the job's container: use instance_type='local_process', "
            "or an s3:// or redis:// shared_cache"
        )
    elif location.kind == "s3":
        env = environment or {}
        keyed = bool(env.get(KEY_ENV) or env.get(KEY_SECRET_ENV))
        timeout_s = config.shared_cache_timeout_s
        _check_bucket(location.bucket, location.prefix, boto_session, timeout_s, keyed=keyed)


def _check_bucket(
    bucket: str, prefix: str, boto_session: Any, timeout_s: float, *, keyed: bool
) -> None:
    import boto3
    from botocore.config import Config
    from botocore.exceptions import BotoCoreError, ClientError

    session = boto_session or boto3.session.Session()
    limits = Config(**aws_call_limits(timeout_s))  # the job's own limits (the container's)
    try:
        account = str(session.client("sts", config=limits).get_caller_identity()["Account"])
        s3 = session.client("s3", config=limits)
        where = "before the job started"
        check_bucket_owner(s3, bucket, account, where=where)
        s3control = session.client("s3control", config=limits)
        check_bucket_private(
            s3, bucket, account, where=where, keyed=keyed, prefix=prefix, s3control=s3control
        )
    except (ClientError, BotoCoreError) as exc:
        raise SharedCacheError(
            f"cannot check who owns the shared_cache bucket {bucket!r}: {exc}. The job needs "
            "credentials that may call sts:GetCallerIdentity and s3:ListBucket on it."
        ) from None


def _normal(name: str) -> str:
    return re.sub(r"[^a-z0-9]+", "_", name.lower()).strip("_")


def _near(name: str) -> bool:
    """Whether ``name`` is a secret's variable under any case, prefix or suffix."""
    normal = _normal(name)
    return any(core in normal for core in _NEAR)


def _forms(secret: str) -> set[str]:
    """How a secret value may appear in a hyperparameter, lower-cased (compared with the
    value lower-cased: a hex key in upper case is the same key): stripped (the job strips
    it: a key read from a file keeps its newline), as JSON writes it (the SDK encodes), and
    its bytes in base64 (standard or URL-safe, unpadded) and in hex."""
    stripped = secret.strip()
    if len(stripped) < _SHORTEST:
        return set()
    raw = stripped.encode()
    encoded = {
        stripped,
        json.dumps(stripped)[1:-1],
        base64.b64encode(raw).decode().rstrip("="),
        base64.urlsafe_b64encode(raw).decode().rstrip("="),
        raw.hex(),
    }
    return {form.lower() for form in encoded}


def _looks_like_key(value: str) -> bool:
    """Whether a secret's name is more likely key material pasted in its place: hex of 16
    characters or more, or base64 of 20 or more with both cases and 3 runs of digits
    (no name a person picks; a key from ``openssl rand -base64 32`` nearly always)."""
    if len(value) >= 16 and re.fullmatch(r"[0-9a-fA-F]+", value):
        return True
    if len(value) < 20 or not re.fullmatch(r"[A-Za-z0-9+/_-]+={0,2}", value):
        return False
    cases = re.search("[a-z]", value) and re.search("[A-Z]", value)
    return bool(cases) and len(re.findall(r"[0-9]+", value)) >= 3


def _check_secret_references(environment: Mapping[str, Any]) -> None:
    """Refuse a ``..._SECRET`` variable that is not a Secrets Manager secret's name or ARN
    (a key pasted in its place would travel in clear); the message never shows the value."""
    for name in _IN_CLEAR.values():
        if name not in environment:
            continue
        value = str(environment[name])
        if _SECRET_ARN.fullmatch(value):
            continue
        if _SECRET_NAME.fullmatch(value) and not _looks_like_key(value):
            continue
        why = (
            "looks like key material, not a secret's name"
            if _SECRET_NAME.fullmatch(value)
            else "is not a secret's name or ARN (those hold letters, digits and /_+=.@- only)"
        )
        raise SharedCacheError(
            f"environment variable {name} must name a secret in AWS Secrets Manager, but its "
            f"value ({len(value)} characters, not shown) {why}: a key or password put there "
            "would travel in clear with the job. Store the secret in Secrets Manager "
            "(aws secretsmanager create-secret --name <name> --secret-string file://<file>) "
            f"and set {name} to its ARN; if the value was a key, it is exposed: make a new one."
        )


def _check_secrets_placed(
    environment: Mapping[str, Any], hyperparameters: Mapping[str, Any]
) -> None:
    """Refuse an empty key, a previous key without a current one, a secret's variable
    under a near name, a ``..._SECRET`` that is no secret's name or ARN, and a shared
    cache secret given as a hyperparameter.

    An empty ``TRCOMP_SHARED_CACHE_KEY`` would mean no key at all, without a word. A
    near name (``trcomp_shared_cache_key``, ``MY_TRCOMP_SHARED_CACHE_KEY``) is read by
    no job: the job would run without its key, and the value would travel as an
    ordinary variable. Hyperparameters are stored and shown with the job
    (DescribeTrainingJob, the job's files): a secret there, by its variable's name (or a
    near one) or by its value (stripped, as the job reads it), is refused, and the
    message names the hyperparameter, never the value.
    """
    refuse_empty_secrets(environment, _SECRET_NAMES)
    refuse_previous_key_alone(environment)
    not_before_of(environment)  # a withdrawal moment without a key, empty or malformed
    for name in environment:
        if str(name) not in _SECRET_NAMES and _near(str(name)):
            raise SharedCacheError(
                f"environment variable {str(name)!r} looks like a shared cache secret's "
                f"variable under another name, which no job reads: the job would run without "
                f"it, and its value would travel as an ordinary variable. Use the exact name "
                f"({', '.join(_SECRET_NAMES)}), or rename it."
            )
    _check_secret_references(environment)
    values = set().union(*(_forms(str(environment[n])) for n in _IN_CLEAR if n in environment))
    for key, value in hyperparameters.items():
        if _near(str(key)) or any(secret in str(value).lower() for secret in values):
            raise SharedCacheError(
                f"hyperparameter {key!r} holds a shared cache secret: hyperparameters are stored "
                "with the job and shown by DescribeTrainingJob. Remove it and pass the secret "
                f"in environment= ({KEY_SECRET_ENV} or {REDIS_PASSWORD_SECRET_ENV}: a Secrets "
                f"Manager ARN; in local modes {KEY_ENV} or {REDIS_PASSWORD_ENV} also work)."
            )
