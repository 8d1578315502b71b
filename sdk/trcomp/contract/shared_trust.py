"""Who may write a shared compile cache: the checks made before one is trusted.

A compile cache is code that every job reading it runs, so a location is
refused when anyone but the job's team could write it:

- an S3 bucket must be of the job's account
  (:func:`~trcomp.contract.shared_cache.check_bucket_owner`) and private
  (:func:`check_bucket_private`: Block Public Access, or else neither a public
  policy nor a public ACL that the account's Block Public Access leaves in force),
  and for a job without a key no write grant to anyone outside the account;
- a ``file://`` directory must be this user's and writable by no one else,
  and so must every directory above it (root's, or sticky like ``/tmp``, also
  do): :mod:`trcomp.contract.owned_dirs`, which also opens it for the store.

Both the SDK (before a job starts) and the container (in the job, with the
job's own credentials) call them. Standard library only: boto3 clients come
from the caller.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from trcomp.contract.bucket_grants import PUBLIC_GROUPS, acl_writers, policy_writers
from trcomp.contract.errors import SharedCacheError
from trcomp.contract.shared_cache import (
    KEY_ENV,
    KEY_SECRET_ENV,
    SharedCacheLocation,
    error_code,
)

__all__ = ["check_bucket_private", "refuse_keyless_team_cache"]


_BLOCK_FLAGS = ("BlockPublicAcls", "IgnorePublicAcls", "BlockPublicPolicy", "RestrictPublicBuckets")
_NO_CONFIG = ("NoSuchPublicAccessBlockConfiguration", "NoSuchBucketPolicy")


def check_bucket_private(
    s3: Any,
    bucket: str,
    account: str,
    *,
    where: str,
    keyed: bool,
    prefix: str = "",
    s3control: Any = None,
) -> None:
    """Refuse ``bucket`` when people outside ``account`` may be let in by a policy or an ACL.

    For every job: passes at once when the bucket's Block Public Access settings
    are all on (S3's default for new buckets) and the job has a key (``keyed``).
    Otherwise S3's own verdict on the bucket policy (GetBucketPolicyStatus) must
    not be public, and the ACL must grant nothing to AllUsers or
    AuthenticatedUsers (any AWS account). S3 enforces the stricter of the
    bucket's and the account's settings, so a public policy is harmless when
    either has ``RestrictPublicBuckets`` and a public ACL when either has
    ``IgnorePublicAcls``; the account's (S3 Control GetPublicAccessBlock, through
    ``s3control``) are read only when the bucket's own facts would refuse it, and
    when they cannot be read (no ``s3control``, denied, unreachable) the bucket's
    facts decide.

    For a job without a key, which cannot tell its team's entries from others',
    also: no write grant in the bucket policy (GetBucketPolicy) or the ACL to
    anyone outside ``account`` for the cache's ``prefix``, public or not, with all
    four settings on or not (:mod:`trcomp.contract.bucket_grants`).

    ``s3`` and ``s3control`` are boto3 clients of the caller, with timeouts;
    ``where`` names the caller in the message.
    """
    block = _call(s3.get_public_access_block, bucket, account, where, "GetBucketPublicAccessBlock")
    flags = block.get("PublicAccessBlockConfiguration", {}) if block else {}
    all_on = all(flags.get(flag) for flag in _BLOCK_FLAGS)
    if all_on and keyed:
        return
    account_block = _AccountBlock(s3control, account)
    status = _call(s3.get_bucket_policy_status, bucket, account, where, "GetBucketPolicyStatus")
    public_policy = bool(status and status.get("PolicyStatus", {}).get("IsPublic"))
    restrict = "RestrictPublicBuckets"
    if public_policy and not flags.get(restrict) and not account_block.on(restrict):
        why = "its bucket policy is public"
        raise SharedCacheError(_public(bucket, where, why, account_block.unread))
    acl = _call(s3.get_bucket_acl, bucket, account, where, "GetBucketAcl") or {}
    for grant in [] if all_on or flags.get("IgnorePublicAcls") else acl.get("Grants", []):
        grantee = grant.get("Grantee", {}).get("URI", "")
        if grantee in PUBLIC_GROUPS and not account_block.on("IgnorePublicAcls"):
            why = f"its ACL grants {grantee.rsplit('/', 1)[-1]} access"
            raise SharedCacheError(_public(bucket, where, why, account_block.unread))
    if keyed:
        return
    policy = _call(s3.get_bucket_policy, bucket, account, where, "GetBucketPolicy")
    owner_id = acl.get("Owner", {}).get("ID")
    restricted = public_policy  # a public policy is still here only where RestrictPublicBuckets is
    reasons = policy_writers(
        str(policy.get("Policy") or "{}"),
        bucket=bucket, prefix=prefix, account=account, owner_id=owner_id, restricted=restricted,
    )  # fmt: skip
    ignored = flags.get("IgnorePublicAcls")
    reasons += acl_writers(
        acl, public_ignored=lambda: bool(ignored) or account_block.on("IgnorePublicAcls")
    )
    if reasons:
        raise SharedCacheError(_other_writers(bucket, where, reasons))


class _AccountBlock:
    """The account's Block Public Access settings, read once, and only when asked."""

    def __init__(self, s3control: Any, account: str) -> None:
        self._s3control = s3control
        self._account = account
        self._flags: dict[str, Any] | None = None
        self.unread = ""
        """Why the settings could not be read ("" when they were, or none are set)."""

    def on(self, flag: str) -> bool:
        if self._flags is None:
            self._flags = self._read()
        return bool(self._flags.get(flag))

    def _read(self) -> dict[str, Any]:
        if self._s3control is None:
            self.unread = "no S3 Control client"
            return {}
        try:
            answer = self._s3control.get_public_access_block(AccountId=self._account)
        except Exception as exc:  # botocore raises many kinds; error_code() sorts them
            # Not knowing only makes the check stricter: the bucket's facts decide.
            code = error_code(exc)
            if code == "NoSuchPublicAccessBlockConfiguration":
                return {}
            if code in ("AccessDenied", "403", "Forbidden"):
                self.unread = "s3:GetAccountPublicAccessBlock was denied"
            else:
                self.unread = f"{type(exc).__name__}: {exc}"
            return {}
        return dict(answer.get("PublicAccessBlockConfiguration") or {})


def _call(method: Any, bucket: str, account: str, where: str, action: str) -> dict[str, Any]:
    try:
        return dict(method(Bucket=bucket, ExpectedBucketOwner=account))
    except Exception as exc:  # botocore raises many kinds; error_code() sorts them
        code = error_code(exc)
        if code in _NO_CONFIG:
            return {}
        if code in ("AccessDenied", "403", "Forbidden"):
            raise SharedCacheError(
                f"cannot check whether the shared_cache bucket {bucket!r} is public ({where}): "
                f"these credentials may not call s3:{action} on it. A compile cache is code, so "
                f"trcomp reads only buckets it can see are private: allow s3:{action} "
                "(and s3:GetBucketPublicAccessBlock, s3:GetBucketPolicyStatus, s3:GetBucketAcl; "
                "s3:GetBucketPolicy for a job without a key)."
            ) from None
        raise


def _other_writers(bucket: str, where: str, reasons: list[str]) -> str:
    shown = "; ".join(reasons[:3]) + (f"; and {len(reasons) - 3} more" if len(reasons) > 3 else "")
    return (
        f"shared_cache bucket {bucket!r} may be written by others than its account ({shown}), "
        f"and this job has no key to tell their entries from its team's, so trcomp refuses it "
        f"({where}): a compile cache is code that every job reading it runs. Set a key "
        "(TRCOMP_SHARED_CACHE_KEY_SECRET, a Secrets Manager ARN, on SageMaker; "
        "TRCOMP_SHARED_CACHE_KEY in local modes), or lock the bucket: remove those grants so "
        "that only your account may write it."
    )


def _public(bucket: str, where: str, why: str, account_unread: str) -> str:
    message = (
        f"shared_cache bucket {bucket!r} may be written by people outside its account ({why}), "
        f"so trcomp refuses it ({where}): a compile cache is code that every job reading it "
        "runs. Turn on all four Block Public Access settings of the bucket "
        "(aws s3api put-public-access-block) or of the account "
        "(aws s3control put-public-access-block), or use a private bucket."
    )
    if account_unread:
        message += (
            f" The account's Block Public Access settings could not be read ({account_unread}),"
            " so only the bucket's own were counted."
        )
    return message


_KEYLESS_TRUSTS = {
    "s3": "every principal that IAM, the bucket policy or an ACL lets write the prefix, "
    "which the job cannot check by itself",
    "redis": "everyone who can reach the Redis and holds its password",
}


def refuse_keyless_team_cache(
    location: SharedCacheLocation, environ: Mapping[str, Any], *, insecure: bool, where: str
) -> None:
    """Refuse an S3 or Redis shared cache to a job without the team's key, unless
    ``insecure`` (``shared_cache_insecure=True``: trust the location alone).

    Without a key a job cannot tell its team's entries from anyone else's who may write
    there, and what it could check on its own machine (a ``file://`` directory's owner and
    mode) does not exist for a bucket or a Redis: whoever else may write them is decided
    by policies and passwords elsewhere. ``environ`` is the job's ``environment=`` (the
    SDK) or environment (the job): the key is there by value or by secret.
    """
    trusts = _KEYLESS_TRUSTS.get(location.kind)
    if trusts is None or insecure or environ.get(KEY_ENV) or environ.get(KEY_SECRET_ENV):
        return
    raise SharedCacheError(
        f"shared_cache {location.shown} has no key ({KEY_ENV} or {KEY_SECRET_ENV}): without "
        f"one a job would run whatever it finds there, trusting {trusts}, so trcomp refuses "
        f"it ({where}): a compile cache is code that every job reading it runs. Give every "
        "job of the team the same key (openssl rand -hex 32): in local modes "
        f"environment={{'{KEY_ENV}': ...}}; on SageMaker store it in AWS Secrets Manager "
        f"and pass environment={{'{KEY_SECRET_ENV}': '<secret ARN>'}}. To trust the "
        "location alone instead, set TrainingCompilerConfig(shared_cache_insecure=True) "
        "(docs/remote.md, What each mode trusts)."
    )
