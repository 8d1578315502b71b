"""The shared cache's secrets: the team's signing key and the Redis password.

Each comes from the job's environment, never its hyperparameters: the value
itself (``TRCOMP_SHARED_CACHE_KEY``, ``TRCOMP_REDIS_PASSWORD``; local modes,
where the environment stays on the machine), or the name or ARN of an AWS
Secrets Manager secret that the job reads with its own role
(``..._SECRET``; SageMaker jobs, whose environment DescribeTrainingJob shows).

The key's secret may also carry the team's ``not_before`` (a JSON document,
:class:`~trcomp.contract.withdrawal.KeySecret`), as may the environment
(``TRCOMP_SHARED_CACHE_NOT_BEFORE``): :func:`team_keys` holds both.
"""

from __future__ import annotations

from collections.abc import Mapping

from trcomp.contract.errors import SharedCacheError
from trcomp.contract.shared_cache import (
    KEY_ENV,
    KEY_SECRET_ENV,
    PREVIOUS_KEY_ENV,
    PREVIOUS_KEY_SECRET_ENV,
    error_code,
    refuse_empty_secrets,
    refuse_previous_key_alone,
)
from trcomp.contract.withdrawal import KeySecret, not_before_of
from trcomp_container.caching.signing import Keys
from trcomp_container.caching.stores import aws_config

__all__ = ["MIN_KEY_BYTES", "read_secret", "team_keys"]

MIN_KEY_BYTES = 16


def read_secret(
    environ: Mapping[str, str], name: str, secret_name: str, *, timeout_s: float
) -> str | None:
    """The value of ``name`` in ``environ``, else of the secret ``secret_name`` names; None.

    Set but empty is refused: it would mean no key (or no password) without a word.
    The secret's reference is never shown (a key pasted there by mistake would be).
    """
    refuse_empty_secrets(environ, (name, secret_name))
    value = environ.get(name)
    if value:
        return value
    reference = environ.get(secret_name)
    if not reference:
        return None
    import boto3
    from botocore.exceptions import ClientError

    region = environ.get("AWS_REGION") or environ.get("AWS_DEFAULT_REGION") or None
    client = boto3.session.Session(region_name=region).client(
        "secretsmanager", config=aws_config(timeout_s)
    )
    try:
        answer = client.get_secret_value(SecretId=reference)
    except ClientError as exc:  # refused or absent: a setting to fix, not a network blip
        what = "an ARN" if reference.startswith("arn:") else "a name"
        raise SharedCacheError(
            f"cannot read the secret that {secret_name} names ({what} of {len(reference)} "
            f"characters; AWS answered {error_code(exc) or type(exc).__name__}): give the job's "
            "role secretsmanager:GetSecretValue on it, or fix the name (it must be the "
            "secret's ARN or name, never the secret itself)"
        ) from None
    text = answer.get("SecretString")
    if text is None:
        text = bytes(answer.get("SecretBinary") or b"").decode("utf-8", "replace")
    return str(text)


def team_keys(environ: Mapping[str, str], *, timeout_s: float) -> Keys:
    """What the job signs and checks with: the current key (first: it signs) and, while the
    team rotates keys, the previous one (:data:`PREVIOUS_KEY_ENV`); and the team's
    ``not_before``, the later of the key secret's and ``TRCOMP_SHARED_CACHE_NOT_BEFORE``.
    Empty when the job has no key (a ``not_before`` without a key is refused)."""
    refuse_previous_key_alone(environ)
    current = _key(environ, KEY_ENV, KEY_SECRET_ENV, timeout_s=timeout_s)
    not_before = not_before_of(environ, current)
    if current is None:
        return Keys()
    previous = _key(environ, PREVIOUS_KEY_ENV, PREVIOUS_KEY_SECRET_ENV, timeout_s=timeout_s)
    keys = [_checked(current.key, KEY_ENV, KEY_SECRET_ENV)]
    if previous is not None:
        old = _checked(previous.key, PREVIOUS_KEY_ENV, PREVIOUS_KEY_SECRET_ENV)
        if old != keys[0]:
            keys.append(old)
    return Keys(tuple(keys), not_before)


def _key(
    environ: Mapping[str, str], name: str, secret_name: str, *, timeout_s: float
) -> KeySecret | None:
    value = read_secret(environ, name, secret_name, timeout_s=timeout_s)
    if value is None:
        return None
    return KeySecret.parse(value, what=f"the shared cache key ({name} or {secret_name})")


def _checked(value: str, name: str, secret_name: str) -> bytes:
    key = value.strip().encode()
    if len(key) < MIN_KEY_BYTES:
        raise SharedCacheError(
            f"the shared cache key ({name} or {secret_name}) is {len(key)} bytes; it must "
            f"be at least {MIN_KEY_BYTES}, and random: make one with `openssl rand -hex 32`"
        )
    return key
