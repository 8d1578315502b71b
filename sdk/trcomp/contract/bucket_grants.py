"""Who besides the bucket's own account may write a shared compile cache on S3.

Read for a job without a key, which cannot tell its team's entries from anyone
else's (:func:`~trcomp.contract.shared_trust.check_bucket_private` refuses the
bucket when these find anyone). Pure functions over what S3 returned
(GetBucketPolicy's JSON, GetBucketAcl's grants), standard library only.

What counts as someone else's write:

- a bucket policy statement with ``"Effect": "Allow"`` whose actions (its
  ``Action`` patterns, or all that its ``NotAction`` leaves out) include one of
  :data:`WRITE_ACTIONS`, whose resources may cover the cache's prefix (in any
  partition; a policy variable such as ``${aws:username}`` read as ``*``), for a
  principal other than the bucket's account: ``"*"``, another account, an AWS
  service, a federated user, or everyone but some (``NotPrincipal``).
  Conditions are not evaluated (``"*"`` limited to an organization is still
  others), and Deny statements are not subtracted: a grant is refused, not weighed;
- an ACL grant of WRITE, WRITE_ACP or FULL_CONTROL to anyone but the bucket's owner
  (to AllUsers or AuthenticatedUsers only where S3 does not ignore public ACLs).
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Mapping
from typing import Any

__all__ = ["PUBLIC_GROUPS", "WRITE_ACTIONS", "acl_writers", "policy_writers"]

WRITE_ACTIONS = ("s3:PutObject", "s3:ReplicateObject", "s3:PutBucketPolicy", "s3:PutBucketAcl")
"""Actions that put an object in the bucket, or let the grantee grant itself that."""
PUBLIC_GROUPS = (
    "http://acs.amazonaws.com/groups/global/AllUsers",
    "http://acs.amazonaws.com/groups/global/AuthenticatedUsers",
)
_WRITE_PERMISSIONS = ("WRITE", "WRITE_ACP", "FULL_CONTROL")
# Where a Resource stops being literal: a wildcard, or a policy variable (``${...}``,
# which IAM fills in per request; ``${*}`` and the like stand for one character).
_WILDCARD = re.compile(r"[*?]|\$\{")
# The partition of an ARN ("aws", "aws-us-gov", "aws-cn", ...): any names the bucket.
_PARTITION = re.compile(r"^arn:[^:*?]*:")


def _listed(value: Any) -> list[str]:
    if value is None:
        return []
    if isinstance(value, list):
        return [str(item) for item in value]
    return [str(value)]


def _glob(pattern: str, text: str, *, case: bool) -> bool:
    """IAM's wildcards: ``*`` any run of characters, ``?`` one; nothing else is special."""
    regex = ".*".join(".".join(map(re.escape, part.split("?"))) for part in pattern.split("*"))
    return re.fullmatch(regex, text, 0 if case else re.IGNORECASE) is not None


def _write_actions(statement: Mapping[str, Any]) -> list[str]:
    if "NotAction" in statement:
        left_out = _listed(statement["NotAction"])
        return [a for a in WRITE_ACTIONS if not any(_glob(p, a, case=False) for p in left_out)]
    allowed = _listed(statement.get("Action"))
    return [a for a in WRITE_ACTIONS if any(_glob(p, a, case=False) for p in allowed)]


def _covers(statement: Mapping[str, Any], bucket: str, prefix: str) -> bool:
    """Whether the statement's resources may include the bucket or objects under ``prefix``.

    Read as a grant, never narrower than it may be: an ARN of any partition
    (``arn:aws:``, ``arn:aws-us-gov:``, ``arn:aws-cn:``, ...) names the bucket, and a
    policy variable (``${aws:username}``) matches anything, as ``*`` does.
    """
    if "NotResource" in statement or "Resource" not in statement:
        return True
    target = f"arn:aws:s3:::{bucket}/" + (f"{prefix.strip('/')}/" if prefix.strip("/") else "")
    for pattern in _listed(statement["Resource"]):
        head = _literal_head(pattern)
        if target.startswith(head) or head.startswith(target):
            return True
    return False


def _literal_head(pattern: str) -> str:
    """What every ARN ``pattern`` matches starts with, in the partition ``aws``."""
    head = _WILDCARD.split(pattern, maxsplit=1)[0]
    if head.startswith("arn:") and head.count(":") < 2:
        return "arn:"  # the partition itself is a pattern ("arn:aws-*:s3:::...")
    return _PARTITION.sub("arn:aws:", head, count=1)


def _account_of(value: str) -> str | None:
    if re.fullmatch(r"\d{12}", value):
        return value
    parts = value.split(":")
    return parts[4] if len(parts) >= 6 and parts[0] == "arn" else None


def _others(principal: Any, account: str, owner_id: str | None) -> list[str]:
    """The principals of ``principal`` that are not of ``account`` (its canonical ``owner_id``)."""
    if principal == "*":
        return ['"*" (anyone)']
    if isinstance(principal, str):
        principal = {"AWS": principal}
    if not isinstance(principal, Mapping):
        return [repr(principal)]
    found = []
    for kind, values in principal.items():
        for value in _listed(values):
            if kind == "AWS" and _account_of(value) == account:
                continue
            if kind == "CanonicalUser" and owner_id and value == owner_id:
                continue
            found.append('"*" (anyone)' if value == "*" else f"{kind} {value}")
    return found


def policy_writers(
    policy: str, *, bucket: str, prefix: str, account: str, owner_id: str | None, restricted: bool
) -> list[str]:
    """Why principals outside ``account`` may write ``prefix`` of ``bucket`` by ``policy``.

    ``restricted``: S3 blocks the policy's grants to other accounts and to anyone
    (the policy is public and RestrictPublicBuckets is in force), which leaves
    only AWS services. Empty when no one else may write.
    """
    statements = json.loads(policy).get("Statement", [])
    if isinstance(statements, Mapping):
        statements = [statements]
    reasons = []
    for statement in statements:
        if not isinstance(statement, Mapping) or statement.get("Effect") != "Allow":
            continue
        actions = _write_actions(statement)
        if not actions or not _covers(statement, bucket, prefix):
            continue
        if "NotPrincipal" in statement:
            others = [f"everyone but {json.dumps(statement['NotPrincipal'])}"]
        else:
            others = _others(statement.get("Principal"), account, owner_id)
        if restricted:
            others = [other for other in others if other.startswith("Service ")]
        sid = f" (statement {statement['Sid']!r})" if statement.get("Sid") else ""
        condition = (
            ", under conditions trcomp does not evaluate" if "Condition" in statement else ""
        )
        reasons += [
            f"its bucket policy{sid} allows {actions[0]} to {other}{condition}" for other in others
        ]
    return reasons


def acl_writers(acl: Mapping[str, Any], *, public_ignored: Callable[[], bool]) -> list[str]:
    """Why someone other than the bucket's owner may write it by its ACL (GetBucketAcl's
    answer). ``public_ignored`` says whether S3 ignores public ACLs here; it is asked only
    when a grant to AllUsers or AuthenticatedUsers would count."""
    owner = acl.get("Owner", {}).get("ID")
    reasons = []
    for grant in acl.get("Grants", []):
        permission = grant.get("Permission")
        grantee = grant.get("Grantee", {})
        if permission not in _WRITE_PERMISSIONS:
            continue
        if grantee.get("Type") == "CanonicalUser" and owner and grantee.get("ID") == owner:
            continue
        uri = str(grantee.get("URI", ""))
        if uri in PUBLIC_GROUPS and public_ignored():
            continue
        who = uri.rsplit("/", 1)[-1] or grantee.get("ID") or grantee.get("EmailAddress")
        reasons.append(f"its ACL grants {permission} to {who or grantee.get('Type')}")
    return reasons
