"""Which grants of a bucket policy or an ACL let someone outside the account write the cache.

Pure functions over what S3 returns; the buckets themselves are in
tests/container/test_shared_cache_grants.py (a moto server).
"""

from __future__ import annotations

import json

import pytest

from trcomp.contract.bucket_grants import acl_writers, policy_writers

ACCOUNT = "123456789012"
ALL_USERS = "http://acs.amazonaws.com/groups/global/AllUsers"


@pytest.mark.parametrize(
    ("statement", "writes"),
    [
        ({"Action": "s3:Put*"}, True),
        ({"Action": "*"}, True),
        ({"Action": ["s3:GetObject", "s3:ListBucket"]}, False),
        ({"NotAction": "s3:GetObject"}, True),  # allows all but reading
        ({"NotAction": ["s3:Put*", "s3:Replicate*"]}, False),
        ({"Action": "s3:PutBucketPolicy", "Resource": "arn:aws:s3:::b"}, True),
        ({"Resource": "arn:aws:s3:::other-bucket/*"}, False),
        ({"Resource": "arn:aws:s3:::b/comp*"}, True),
        # Every partition names the bucket; a policy variable matches anything.
        ({"Resource": "arn:aws-us-gov:s3:::b/*"}, True),
        ({"Resource": "arn:aws-cn:s3:::b/compile/*"}, True),
        ({"Resource": "arn:aws-iso-b:s3:::b/*"}, True),
        ({"Resource": "arn:aws-us*:s3:::b/*"}, True),
        ({"Resource": "arn:aws:s3:::b/${aws:username}/*"}, True),
        ({"Resource": "arn:aws:s3:::${aws:PrincipalTag/team}/*"}, True),
        ({"Resource": "arn:aws-cn:s3:::b/${aws:userid}"}, True),
        ({"Resource": "arn:aws-us-gov:s3:::other-bucket/*"}, False),
        ({"Resource": "arn:aws:s3:::b/logs/${aws:username}/*"}, False),
        ({"NotPrincipal": {"AWS": f"arn:aws:iam::{ACCOUNT}:root"}}, True),
        ({"Principal": {"AWS": f"arn:aws:iam::{ACCOUNT}:user/alice"}}, False),
        ({"Principal": {"CanonicalUser": "owner-id"}}, False),
        ({"Principal": {"Federated": "cognito-identity.amazonaws.com"}}, True),
        ({"Effect": "Deny"}, False),
    ],
)
def test_what_counts_as_a_write_grant_to_others(statement, writes):
    base = {
        "Effect": "Allow",
        "Principal": "*",
        "Action": "s3:PutObject",
        "Resource": "arn:aws:s3:::b/*",
    }
    if "NotPrincipal" in statement:
        base.pop("Principal")
    if "NotAction" in statement:
        base.pop("Action")
    policy = json.dumps({"Statement": {**base, **statement}})
    found = policy_writers(
        policy, bucket="b", prefix="compile", account=ACCOUNT, owner_id="owner-id", restricted=False
    )
    assert bool(found) == writes, found


def test_a_public_grant_under_restrict_public_buckets_and_ignore_public_acls_counts_no_more():
    anyone = json.dumps(
        {"Statement": {"Effect": "Allow", "Principal": "*", "Action": "s3:*", "Resource": "*"}}
    )
    args = {"bucket": "b", "prefix": "", "account": ACCOUNT, "owner_id": None}
    assert policy_writers(anyone, **args, restricted=False)
    assert not policy_writers(anyone, **args, restricted=True)
    public = {
        "Owner": {"ID": "me"},
        "Grants": [
            {"Grantee": {"Type": "Group", "URI": ALL_USERS}, "Permission": "WRITE"},
            {"Grantee": {"Type": "CanonicalUser", "ID": "me"}, "Permission": "FULL_CONTROL"},
        ],
    }  # fmt: skip
    assert acl_writers(public, public_ignored=lambda: False) == ["its ACL grants WRITE to AllUsers"]
    assert acl_writers(public, public_ignored=lambda: True) == []
