"""A job without a key reads only a bucket that no one outside its account may write.

A moto S3 server; every bucket has all four Block Public Access settings on (they
stop public grants, not a grant to another account or one under a condition). An
unsigned entry is planted in each: a job without a key refuses the bucket, with
nothing unpacked; a job with the key reads the bucket and skips the planted entry.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.container.test_shared_cache_reads import _files, _open
from tests.container.test_shared_cache_trust import _plant
from tests.helpers.aws import (
    ACCOUNT,
    OTHER_ACCOUNT,
    aws_environment,
    create_bucket,
    moto_server,
    s3control_resolves,
)
from trcomp.contract.errors import SharedCacheError
from trcomp_container.caching.compat import compat_set

KEY = "team-a-key-0123456789abcdef"
COMPAT = compat_set(engine="inductor", gpu_listing=None)
BLOCK_FLAGS = ("BlockPublicAcls", "IgnorePublicAcls", "BlockPublicPolicy", "RestrictPublicBuckets")
OTHER_CANONICAL_ID = "79a59df900b949e55d96a1e698fbacedfd6e09d98eacf8f8d5218e7cd47ef2be"


def _policy(principal: object, action: object, resource: str, **extra: object) -> str:
    statement = {"Effect": "Allow", "Principal": principal, "Action": action, "Resource": resource}
    return json.dumps({"Version": "2012-10-17", "Statement": [{**statement, **extra}]})


ORG_ONLY = {"Condition": {"StringEquals": {"aws:PrincipalOrgID": "o-a1b2c3d4e5"}}}
GRANTS = {
    "another-account": (
        lambda b: _policy(
            {"AWS": f"arn:aws:iam::{OTHER_ACCOUNT}:root"}, "s3:PutObject", f"arn:aws:s3:::{b}/*"
        ),
        f"allows s3:PutObject to AWS arn:aws:iam::{OTHER_ACCOUNT}:root",
    ),
    "anyone-in-the-org": (
        lambda b: _policy("*", "s3:*", f"arn:aws:s3:::{b}/*", **ORG_ONLY),
        'allows s3:PutObject to "*" (anyone), under conditions trcomp does not evaluate',
    ),
    "acl-write": (None, f"its ACL grants WRITE to {OTHER_CANONICAL_ID}"),
    # A policy variable in Resource is a wildcard; any partition's ARN names the bucket.
    "username-variable": (
        lambda b: _policy(
            {"AWS": f"arn:aws:iam::{OTHER_ACCOUNT}:root"}, "s3:PutObject",
            f"arn:aws:s3:::{b}/${{aws:username}}/*",
        ),
        f"allows s3:PutObject to AWS arn:aws:iam::{OTHER_ACCOUNT}:root",
    ),
    "us-gov-partition": (
        lambda b: _policy(
            {"AWS": f"arn:aws:iam::{OTHER_ACCOUNT}:root"}, "s3:PutObject",
            f"arn:aws-us-gov:s3:::{b}/*",
        ),
        f"allows s3:PutObject to AWS arn:aws:iam::{OTHER_ACCOUNT}:root",
    ),
    "cn-partition": (
        lambda b: _policy(
            {"AWS": f"arn:aws:iam::{OTHER_ACCOUNT}:root"}, "s3:*", f"arn:aws-cn:s3:::{b}/compile/*",
        ),
        f"allows s3:PutObject to AWS arn:aws:iam::{OTHER_ACCOUNT}:root",
    ),
}  # fmt: skip


@pytest.fixture(scope="module")
def moto(tmp_path_factory):
    with (
        moto_server(tmp_path_factory.mktemp("moto")) as server,
        aws_environment(server.url),
        s3control_resolves(),
    ):
        yield server


def _bucket_with(bucket: str, policy: str | None, tmp: Path, acl_write: bool = False) -> None:
    """A bucket of the job's account with ``policy`` (or an ACL write grant to another
    account), all four Block Public Access settings on, and a planted unsigned entry."""
    import boto3

    s3 = boto3.client("s3")
    create_bucket(bucket)
    if policy:
        s3.put_bucket_policy(Bucket=bucket, Policy=policy)
    if acl_write:
        owner = s3.get_bucket_acl(Bucket=bucket)["Owner"]
        grants = [
            {"Grantee": {"Type": "CanonicalUser", "ID": owner["ID"]}, "Permission": "FULL_CONTROL"},
            {"Grantee": {"Type": "CanonicalUser", "ID": OTHER_CANONICAL_ID}, "Permission": "WRITE"},
        ]
        s3.put_bucket_acl(Bucket=bucket, AccessControlPolicy={"Grants": grants, "Owner": owner})
    s3.put_public_access_block(
        Bucket=bucket, PublicAccessBlockConfiguration=dict.fromkeys(BLOCK_FLAGS, True)
    )
    planted = _plant(tmp / bucket, [("inductor/fxgraph/evil", b"planted")])
    key = f"compile/{COMPAT.key}/{planted.name}"
    s3.put_object(Bucket=bucket, Key=key, Body=planted.read_bytes())


@pytest.mark.parametrize("grant", sorted(GRANTS))
def test_a_bucket_others_may_write_is_refused_to_a_job_without_a_key(moto, tmp_path, grant):
    make_policy, says = GRANTS[grant]
    bucket = f"{grant}-cache"
    policy = make_policy(bucket) if make_policy else None
    _bucket_with(bucket, policy, tmp_path, acl_write=not make_policy)
    uri = f"s3://{bucket}/compile"
    with pytest.raises(SharedCacheError, match="no key to tell their entries") as caught:
        _open(uri, tmp_path / "keyless" / "live")
    message = str(caught.value)
    assert says in message and "Set a key" in message and "lock the bucket" in message
    assert _files(tmp_path / "keyless" / "live") == []  # the planted file, before
    keyed = _open(uri, tmp_path / "keyed" / "live", KEY)  # the key tells the planted entry
    assert keyed.facts["entries_found"] == 1 and keyed.facts["entries_skipped"] == 1


def test_a_bucket_only_its_account_may_write_is_read_without_a_key(moto, tmp_path):
    policy = _policy(
        {"AWS": [f"arn:aws:iam::{ACCOUNT}:role/trainer", ACCOUNT]},
        ["s3:PutObject", "s3:GetObject"],
        "arn:aws:s3:::own-cache/*",
    )
    _bucket_with("own-cache", policy, tmp_path)
    cache = _open("s3://own-cache/compile", tmp_path / "live")
    assert cache.facts["files_read"] == 1  # without a key, the location is what is trusted


def test_a_write_grant_elsewhere_in_the_bucket_is_not_the_caches(moto, tmp_path):
    logs = _policy(
        {"Service": "logging.s3.amazonaws.com"}, "s3:PutObject", "arn:aws:s3:::logs-cache/logs/*"
    )
    _bucket_with("logs-cache", logs, tmp_path)
    assert _open("s3://logs-cache/compile", tmp_path / "live").facts["files_read"] == 1
    with pytest.raises(SharedCacheError, match=r"Service logging\.s3\.amazonaws\.com"):
        _open("s3://logs-cache/logs", tmp_path / "logs")
