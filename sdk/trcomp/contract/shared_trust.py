"""Who may write a shared compile cache: the checks made before one is trusted.

A compile cache is code that every job reading it runs, so a location is
refused when anyone but the job's team could write it:

- an S3 bucket must be of the job's account
  (:func:`~trcomp.contract.shared_cache.check_bucket_owner`) and private
  (:func:`check_bucket_private`: Block Public Access, or else neither a public
  policy nor a public ACL);
- a ``file://`` directory must be this user's and writable by no one else
  (:func:`check_directory`).

Both the SDK (before a job starts) and the container (in the job, with the
job's own credentials) call them. Standard library only: boto3 clients come
from the caller.
"""

from __future__ import annotations

import os
import stat
from pathlib import Path
from typing import Any

from trcomp.contract.errors import SharedCacheError
from trcomp.contract.shared_cache import error_code

__all__ = ["check_bucket_private", "check_directory"]


_BLOCK_FLAGS = ("BlockPublicAcls", "IgnorePublicAcls", "BlockPublicPolicy", "RestrictPublicBuckets")
_PUBLIC_GRANTEES = (
    "http://acs.amazonaws.com/groups/global/AllUsers",
    "http://acs.amazonaws.com/groups/global/AuthenticatedUsers",
)
_NO_CONFIG = ("NoSuchPublicAccessBlockConfiguration", "NoSuchBucketPolicy")


def check_bucket_private(s3: Any, bucket: str, account: str, *, where: str) -> None:
    """Refuse ``bucket`` when people outside ``account`` may be let in by a policy or an ACL.

    Passes at once when the bucket's Block Public Access settings are all on
    (S3's default for new buckets). Otherwise S3's own verdict on the bucket
    policy (GetBucketPolicyStatus) must not be public, and the ACL must grant
    nothing to AllUsers or AuthenticatedUsers (any AWS account). ``s3`` is a
    boto3 S3 client of the caller; ``where`` names the caller in the message.
    """
    block = _call(s3.get_public_access_block, bucket, account, where, "GetBucketPublicAccessBlock")
    flags = block.get("PublicAccessBlockConfiguration", {}) if block else {}
    if all(flags.get(flag) for flag in _BLOCK_FLAGS):
        return
    status = _call(s3.get_bucket_policy_status, bucket, account, where, "GetBucketPolicyStatus")
    public_policy = bool(status and status.get("PolicyStatus", {}).get("IsPublic"))
    if public_policy and not flags.get("RestrictPublicBuckets"):
        raise SharedCacheError(_public(bucket, where, "its bucket policy is public"))
    if flags.get("IgnorePublicAcls"):
        return
    acl = _call(s3.get_bucket_acl, bucket, account, where, "GetBucketAcl") or {}
    for grant in acl.get("Grants", []):
        grantee = grant.get("Grantee", {}).get("URI", "")
        if grantee in _PUBLIC_GRANTEES:
            group = grantee.rsplit("/", 1)[-1]
            raise SharedCacheError(_public(bucket, where, f"its ACL grants {group} access"))


def _call(method: Any, bucket: str, account: str, where: str, action: str) -> dict[str, Any]:
    try:
        return dict(method(Bucket=bucket, ExpectedBucketOwner=account))
    except Exception as exc:
        code = error_code(exc)
        if code in _NO_CONFIG:
            return {}
        if code in ("AccessDenied", "403", "Forbidden"):
            raise SharedCacheError(
                f"cannot check whether the shared_cache bucket {bucket!r} is public ({where}): "
                f"these credentials may not call s3:{action} on it. A compile cache is code, so "
                f"trcomp reads only buckets it can see are private: allow s3:{action} "
                "(and s3:GetBucketPublicAccessBlock, s3:GetBucketPolicyStatus, s3:GetBucketAcl)."
            ) from None
        raise


def _public(bucket: str, where: str, why: str) -> str:
    return (
        f"shared_cache bucket {bucket!r} may be written by people outside its account ({why}), "
        f"so trcomp refuses it ({where}): a compile cache is code that every job reading it "
        "runs. Turn on all four Block Public Access settings of the bucket "
        "(aws s3api put-public-access-block) or use a private bucket."
    )


def _uid() -> int:
    return os.geteuid()


def check_directory(path: Path, *, where: str) -> None:
    """Refuse a ``file://`` location that someone other than this user could write.

    ``path``, once it exists, must be owned by this user and writable by neither
    group nor others; no directory above it may be writable by others without
    the sticky bit (they could swap it for their own). What does not exist yet
    the job creates, with no write bit for group or others, and checks again.
    """
    strict = True  # only for path itself
    for current in (path, *path.parents):
        try:
            info = current.stat()
        except FileNotFoundError:
            strict = False
            continue
        except OSError as exc:
            raise SharedCacheError(
                f"cannot check shared_cache directory {current}: {exc}"
            ) from None
        mode = stat.filemode(info.st_mode)
        if strict:
            strict = False
            if info.st_uid != _uid():
                raise SharedCacheError(
                    _foreign(path, current, where, f"owned by uid {info.st_uid}")
                )
            if info.st_mode & (stat.S_IWGRP | stat.S_IWOTH):
                raise SharedCacheError(
                    _foreign(path, current, where, f"writable by group or others ({mode})")
                )
        elif info.st_mode & stat.S_IWOTH and not info.st_mode & stat.S_ISVTX:
            raise SharedCacheError(_foreign(path, current, where, f"writable by anyone ({mode})"))


def _foreign(path: Path, current: Path, where: str, why: str) -> str:
    return (
        f"shared_cache directory {path} may be written by someone else ({current} is {why}), "
        f"so trcomp refuses it ({where}): a compile cache is code that every job reading it "
        f"runs. Make it yours and writable only by you (chown; chmod go-w {current}), or "
        "choose a directory that is."
    )
