"""The shared compile cache's location (``TrainingCompilerConfig(shared_cache=...)``).

Both sides read the URI with :func:`parse_location`: the config checks it, the
SDK checks the bucket before a job starts, the container reads and writes the
cache. :func:`check_bucket_owner` is the one ownership check of an S3 bucket;
it takes boto3 clients made by the caller, so this module imports no AWS code.

A compile cache is code: inductor, triton and JAX load what they find there
and run it. Whoever can write the location can run code in every job that
reads it, so an S3 bucket must belong to the job's own account and block
public access (:mod:`trcomp.contract.shared_trust`), a Redis password never travels
in the URI (it would sit in the job's hyperparameters), and entries may be
signed with a key of the team (:data:`KEY_ENV`; docs/remote.md).
"""

from __future__ import annotations

import re
import unicodedata
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any, Literal
from urllib.parse import unquote, urlsplit

from trcomp.contract.env import (
    KEY_ENV,
    KEY_SECRET_ENV,
    MAX_READ_BYTES_ENV,
    PREVIOUS_KEY_ENV,
    PREVIOUS_KEY_SECRET_ENV,
    REDIS_CA_ENV,
    REDIS_PASSWORD_ENV,
    REDIS_PASSWORD_SECRET_ENV,
)
from trcomp.contract.errors import SharedCacheError

__all__ = [
    "KEY_ENV",
    "KEY_SECRET_ENV",
    "MAX_READ_BYTES_ENV",
    "PREVIOUS_KEY_ENV",
    "PREVIOUS_KEY_SECRET_ENV",
    "REDIS_CA_ENV",
    "REDIS_PASSWORD_ENV",
    "REDIS_PASSWORD_SECRET_ENV",
    "SCHEMES",
    "SharedCacheLocation",
    "aws_call_limits",
    "check_bucket_owner",
    "error_code",
    "parse_location",
    "refuse_empty_secrets",
    "refuse_previous_key_alone",
]

# The job's environment, never its hyperparameters (DescribeTrainingJob shows those):
# the names, their writers and readers are in the registry (trcomp.contract.env).

SCHEMES = ("s3", "file", "redis", "rediss")
Kind = Literal["s3", "file", "redis"]
# S3's bucket naming rules (general purpose buckets): 3-63 characters.
_BUCKET = re.compile(r"[a-z0-9][a-z0-9.-]{1,61}[a-z0-9]")
_SHOWN = 80


def _shown(value: str) -> str:
    text = repr(value)
    return text if len(text) <= _SHOWN else text[: _SHOWN - 5] + "...'"


@dataclass(frozen=True)
class SharedCacheLocation:
    """A parsed ``shared_cache`` URI.

    ``kind`` is ``s3``, ``file`` or ``redis`` (``rediss://`` is Redis over TLS).
    For S3: ``bucket`` and ``prefix`` (no leading or trailing slash). For a
    directory: ``path``. For Redis: ``host``, ``port``, ``username`` (an ACL
    user, or ""), ``db`` and ``tls`` (``rediss://``); the password is never in
    the URI (:data:`REDIS_PASSWORD_ENV`). ``shown`` is the URI, for logs.
    """

    uri: str
    kind: Kind
    shown: str
    bucket: str = ""
    prefix: str = ""
    path: str = ""
    host: str = ""
    port: int = 0
    username: str = ""
    db: int = 0
    tls: bool = False


def parse_location(uri: str) -> SharedCacheLocation:
    """Parse and check a ``shared_cache`` URI; raise ``ValueError`` saying what to write."""
    if not isinstance(uri, str) or not uri.strip():
        raise ValueError(
            "shared_cache must be a URI: s3://bucket/prefix, file:///absolute/path or "
            "redis://host:port"
        )
    if any(c.isspace() for c in uri):
        raise ValueError(f"shared_cache {_shown(uri)} contains white space: remove it")
    odd = next((c for c in uri if unicodedata.category(c) in ("Cc", "Cf")), None)
    if odd is not None:  # a NUL byte, or a bidi control that makes the URI read otherwise
        raise ValueError(
            f"shared_cache contains the control or format character U+{ord(odd):04X}: type "
            "the URI again without it"
        )
    scheme = uri.split("://", 1)[0].lower() if "://" in uri else ""
    if scheme not in SCHEMES:
        raise ValueError(
            f"shared_cache {_shown(uri)} has no supported scheme: write s3://bucket/prefix "
            "(S3), file:///absolute/path (a shared file system or a local directory) or "
            "redis://host:port (inductor's remote caches)"
        )
    parts = urlsplit(uri)
    if parts.query or parts.fragment:
        raise ValueError(f"shared_cache {_shown(uri)} has a query or fragment: drop the ?/# part")
    if scheme == "s3":
        return _s3(uri, parts.netloc, parts.path)
    if scheme == "file":
        return _file(uri, parts.netloc, parts.path)
    return _redis(uri, parts)


def _s3(uri: str, bucket: str, path: str) -> SharedCacheLocation:
    if not _BUCKET.fullmatch(bucket) or ".." in bucket:
        raise ValueError(
            f"shared_cache {_shown(uri)}: {_shown(bucket)} is not an S3 bucket name "
            "(3-63 lower-case letters, digits, dots and hyphens): write s3://bucket/prefix"
        )
    prefix = path.removeprefix("/").rstrip("/")
    if any(part in ("", ".", "..") for part in prefix.split("/")) and prefix:
        raise ValueError(
            f"shared_cache {_shown(uri)}: the prefix has an empty, '.' or '..' segment: "
            "write s3://bucket/team/compile-cache"
        )
    return SharedCacheLocation(uri=uri, kind="s3", shown=uri, bucket=bucket, prefix=prefix)


def _file(uri: str, host: str, path: str) -> SharedCacheLocation:
    if host not in ("", "localhost"):
        raise ValueError(
            f"shared_cache {_shown(uri)} names the host {_shown(host)}: a file:// cache is a "
            "directory the job can see; write file:///absolute/path (three slashes)"
        )
    path = unquote(path)
    if not path.startswith("/") or any(part in (".", "..") for part in path.split("/")):
        raise ValueError(
            f"shared_cache {_shown(uri)} is not an absolute path without '.' or '..': "
            "write file:///absolute/path"
        )
    return SharedCacheLocation(uri=uri, kind="file", shown=uri, path=path.rstrip("/") or "/")


def _redis(uri: str, parts: Any) -> SharedCacheLocation:
    try:
        port = parts.port
    except ValueError:
        port = None
    if not parts.hostname or not port:  # port 0 is no port
        raise ValueError(
            f"shared_cache {_shown(_without_password(uri, parts))} needs a host and a port: "
            "write rediss://host:6379 (TLS) or redis://host:6379"
        )
    if parts.path not in ("", "/") and not re.fullmatch(r"/\d{1,2}", parts.path):
        raise ValueError(
            f"shared_cache {_shown(_without_password(uri, parts))}: the path must be a "
            "database number (redis://host:6379/0) or nothing"
        )
    if parts.password is not None:
        raise ValueError(
            f"shared_cache {_shown(_without_password(uri, parts))} holds a password: the URI is "
            "stored in the job's hyperparameters, which DescribeTrainingJob shows to anyone who "
            f"may read the job. Drop it from the URI and give the job {REDIS_PASSWORD_SECRET_ENV}"
            f" (a Secrets Manager secret) or, in local modes, {REDIS_PASSWORD_ENV} "
            "(docs/remote.md)"
        )
    if ":" in unquote(parts.username or ""):
        raise ValueError(
            "shared_cache holds a ':' in its Redis user name (%3A), where a password would "
            f"follow: drop it from the URI and give the job {REDIS_PASSWORD_SECRET_ENV} (a "
            f"Secrets Manager secret) or, in local modes, {REDIS_PASSWORD_ENV} (docs/remote.md)"
        )
    return SharedCacheLocation(
        uri=uri,
        kind="redis",
        shown=uri,
        host=parts.hostname,
        port=int(port),
        username=unquote(parts.username or ""),
        db=int(parts.path.strip("/") or 0),
        tls=uri.lower().startswith("rediss://"),
    )


def _without_password(uri: str, parts: Any) -> str:
    if parts.password is None:
        return uri
    user = parts.username or ""
    return uri.replace(f"{user}:{parts.password}@", f"{user}:***@", 1)


def refuse_empty_secrets(environ: Mapping[str, Any], names: Iterable[str]) -> None:
    """Refuse a secret's variable (the key, the Redis password, or their secret's name) that
    is set but empty: it would mean none, without a word. The SDK and the job both check."""
    for name in names:
        if name in environ and not str(environ[name]).strip():
            raise SharedCacheError(
                f"environment variable {name} is set but empty: an empty key or password "
                "would mean none. Give it a value (a key: `openssl rand -hex 32`) or remove it."
            )


def refuse_previous_key_alone(environ: Mapping[str, Any]) -> None:
    """Refuse a previous key (:data:`PREVIOUS_KEY_ENV`) without a current one: the job
    would sign nothing, and read entries of a key the team is retiring. The SDK and the
    job both check."""
    previous = PREVIOUS_KEY_ENV in environ or PREVIOUS_KEY_SECRET_ENV in environ
    if previous and KEY_ENV not in environ and KEY_SECRET_ENV not in environ:
        raise SharedCacheError(
            f"{PREVIOUS_KEY_ENV} (or {PREVIOUS_KEY_SECRET_ENV}) is set without a current key: "
            f"a previous key only adds to the current one while keys rotate. Set {KEY_ENV} "
            f"(or {KEY_SECRET_ENV}) to the new key, or remove the previous one."
        )


def aws_call_limits(timeout_s: float) -> dict[str, Any]:
    """botocore ``Config`` arguments for every shared-cache AWS call, on both sides.

    Connect and read within ``timeout_s`` (at least 1 s, at most 60 s), at most
    two attempts: a store that does not answer must not hold a job (or ``fit()``).
    """
    seconds = max(1.0, min(float(timeout_s), 60.0))
    return {
        "connect_timeout": seconds,
        "read_timeout": seconds,
        "retries": {"max_attempts": 2, "mode": "standard"},
    }


def error_code(exc: BaseException) -> str:
    """The AWS error code of a botocore ``ClientError`` ("" for any other exception)."""
    response = getattr(exc, "response", None)
    if not isinstance(response, dict):
        return ""
    code = str(response.get("Error", {}).get("Code", ""))
    status = response.get("ResponseMetadata", {}).get("HTTPStatusCode")
    if not code or code.isdigit():
        code = {403: "AccessDenied", 404: "NoSuchBucket"}.get(int(status or code or 0), code)
    return code


def check_bucket_owner(s3: Any, bucket: str, account: str, *, where: str) -> None:
    """Refuse ``bucket`` unless the AWS account ``account`` owns it.

    ``s3`` is a boto3 S3 client with the job's credentials (the user's in the
    SDK, the job's role in the container), ``account`` their account
    (STS GetCallerIdentity). ListBuckets names the buckets the account owns;
    without permission to call it, HeadBucket with ``ExpectedBucketOwner``
    answers (S3 refuses it with 403 for another owner's bucket). ``where``
    names the caller in the message (``"before the job"``, ``"in the job"``).
    """
    try:
        owned = {b["Name"] for b in s3.list_buckets().get("Buckets", [])}
    except Exception as exc:  # botocore raises many kinds; the code decides, others re-raise
        if error_code(exc) not in ("AccessDenied", "AllAccessDisabled"):
            raise
        owned = None
    if owned is not None:
        if bucket in owned:
            return
        raise SharedCacheError(_not_owned(bucket, account, where))
    try:
        s3.head_bucket(Bucket=bucket, ExpectedBucketOwner=account)
    except Exception as exc:  # botocore raises many kinds; error_code() sorts them
        code = error_code(exc)
        if code in ("AccessDenied", "403", "Forbidden"):
            raise SharedCacheError(
                _not_owned(bucket, account, where)
                + " (or these credentials may not call s3:ListBucket on it)"
            ) from None
        if code in ("NoSuchBucket", "404", "NotFound"):
            raise SharedCacheError(
                f"shared_cache bucket {bucket!r} does not exist ({where}): create it in "
                f"account {account} or pass another s3:// location"
            ) from None
        raise


def _not_owned(bucket: str, account: str, where: str) -> str:
    return (
        f"shared_cache bucket {bucket!r} is not owned by the job's AWS account {account}, so "
        f"trcomp refuses it ({where}): a compile cache is code that every job reading it "
        "runs, and the bucket's owner could put anything there. Use a bucket of account "
        f"{account}."
    )
