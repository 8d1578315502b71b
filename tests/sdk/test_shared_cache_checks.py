"""``shared_cache=`` checked at ``fit()``, before anything is created or uploaded.

A moto server holds a bucket of the caller's account and one of another account
(moto takes the account from the ``x-moto-account-id`` header). Remote jobs are
submitted to moto for real; process mode runs nothing when it refuses.
"""

from __future__ import annotations

import base64
import json
import warnings
from collections.abc import Iterator
from pathlib import Path

import pytest

import trcomp
from tests.helpers.aws import (
    ACCOUNT,
    OTHER_ACCOUNT,
    MotoServer,
    aws_environment,
    create_bucket,
    create_sagemaker_role,
    moto_server,
    s3control_resolves,
)
from tests.helpers.hung_server import hung_server
from trcomp.contract.errors import (
    CompilerConfigError,
    CompilerConfigWarning,
    LocalModeError,
    SharedCacheError,
)

pytestmark = pytest.mark.slow

FOREIGN = "s3://someone-elses-cache/compile"
OWN = "s3://team-cache/compile"


@pytest.fixture(scope="module")
def moto(tmp_path_factory: pytest.TempPathFactory) -> Iterator[MotoServer]:
    with (
        moto_server(tmp_path_factory.mktemp("moto")) as server,
        aws_environment(server.url),
        s3control_resolves(),
    ):
        create_bucket("team-cache")
        create_bucket("someone-elses-cache", account=OTHER_ACCOUNT)
        yield server


@pytest.fixture(scope="module")
def role(moto: MotoServer) -> str:
    return create_sagemaker_role("trcomp-shared-cache")


def _estimator(
    tmp: Path,
    role: str,
    uri: str,
    instance_type: str,
    *,
    insecure: bool = False,
    timeout_s: float = 5.0,
    **kwargs,
):
    (tmp / "src").mkdir(exist_ok=True)
    (tmp / "src" / "train.py").write_text("print('trained')\n")
    return trcomp.PyTorch(
        entry_point="train.py",
        source_dir=str(tmp / "src"),
        role=role,
        instance_type=instance_type,
        instance_count=1,
        compiler_config=trcomp.TrainingCompilerConfig(
            backend="inductor",
            shared_cache=uri,
            shared_cache_insecure=insecure,
            shared_cache_timeout_s=timeout_s,
        ),
        **kwargs,
    )


def test_process_mode_refuses_another_accounts_bucket_before_anything_runs(moto, role, tmp_path):
    out = tmp_path / "out"
    estimator = _estimator(
        tmp_path, role, FOREIGN, "local_process", output_path=f"file://{out}", insecure=True
    )
    with pytest.raises(SharedCacheError, match="not owned by the job's AWS account 123456789012"):
        estimator.fit(job_name="foreign-cache")
    assert not out.exists()  # no job folder: nothing was created


def test_a_remote_job_with_another_accounts_bucket_is_never_submitted(moto, role, tmp_path):
    before = len(moto.json_requests("CreateTrainingJob"))
    puts = len([r for r in moto.requests() if r["method"] == "PUT"])
    estimator = _estimator(tmp_path, role, FOREIGN, "ml.g5.xlarge")
    with pytest.raises(SharedCacheError, match="before the job started"):
        estimator.fit(wait=False)
    assert len(moto.json_requests("CreateTrainingJob")) == before
    assert len([r for r in moto.requests() if r["method"] == "PUT"]) == puts  # no upload


def test_a_remote_job_with_its_own_accounts_bucket_is_submitted_with_the_location(
    moto, role, tmp_path
):
    estimator = _estimator(tmp_path, role, OWN, "ml.g5.xlarge", insecure=True)
    estimator.fit(wait=False, job_name="own-shared-cache")
    (sent,) = [
        r
        for r in moto.json_requests("CreateTrainingJob")
        if r["TrainingJobName"] == "own-shared-cache"
    ]
    config = json.loads(sent["HyperParameters"]["sagemaker_training_compiler_config"])
    assert config["shared_cache"] == OWN


SECRET_ARN = "arn:aws:secretsmanager:us-west-2:123456789012:secret:team-redis-AbCdEf"
KEY_ARN = "arn:aws:secretsmanager:us-west-2:123456789012:secret:team-cache-key-AbCdEf"
KEY_SECRET_ENV = "TRCOMP_SHARED_CACHE_KEY_SECRET"


@pytest.mark.parametrize(
    ("uri", "environment", "says"),
    [
        ("redis://cache.internal:6379", {"TRCOMP_REDIS_PASSWORD_SECRET": SECRET_ARN}, "no TLS"),
        ("rediss://cache.internal:6379", {}, "no password"),
    ],
)
def test_a_remote_jobs_redis_needs_tls_and_a_password_unless_opted_out(
    moto, role, tmp_path, uri, environment, says
):
    with pytest.raises(SharedCacheError, match=says) as caught:
        _estimator(tmp_path, role, uri, "ml.g5.xlarge", environment=environment)
    assert "shared_cache_insecure=True" in str(caught.value)
    with pytest.warns(CompilerConfigWarning, match="shared_cache_insecure=True"):
        _estimator(tmp_path, role, uri, "ml.g5.xlarge", environment=environment, insecure=True)
    with warnings.catch_warnings():
        warnings.simplefilter("error", CompilerConfigWarning)
        _estimator(tmp_path, role, uri, "local_process")  # local modes: no refusal


def test_a_remote_jobs_redis_password_never_travels_with_the_job(moto, role, tmp_path):
    with pytest.raises(CompilerConfigError, match="holds a password"):
        _estimator(tmp_path, role, "rediss://:hunter2pw@cache.internal:6379", "ml.g5.xlarge")
    clear = _estimator(
        tmp_path, role, "rediss://cache.internal:6379", "ml.g5.xlarge",
        environment={"TRCOMP_REDIS_PASSWORD": "hunter2pw"},
    )  # fmt: skip
    before = len(moto.json_requests("CreateTrainingJob"))
    with pytest.raises(SharedCacheError, match="TRCOMP_REDIS_PASSWORD_SECRET") as caught:
        clear.fit(wait=False, job_name="clear-password")
    assert "hunter2pw" not in str(caught.value)
    assert len(moto.json_requests("CreateTrainingJob")) == before
    estimator = _estimator(
        tmp_path, role, "rediss://cache.internal:6379", "ml.g5.xlarge",
        environment={"TRCOMP_REDIS_PASSWORD_SECRET": SECRET_ARN, KEY_SECRET_ENV: KEY_ARN},
    )  # fmt: skip
    estimator.fit(wait=False, job_name="secret-password")
    (sent,) = [
        r
        for r in moto.json_requests("CreateTrainingJob")
        if r["TrainingJobName"] == "secret-password"
    ]
    assert "hunter2pw" not in json.dumps(sent)
    assert sent["Environment"]["TRCOMP_REDIS_PASSWORD_SECRET"] == SECRET_ARN


def test_a_key_in_hyperparameters_or_an_empty_key_never_reaches_a_job(moto, role, tmp_path):
    key = "0123456789abcdef" * 4
    cases = [
        ({"hyperparameters": {"trcomp-shared-cache-key": key}}, "hyperparameter"),
        (
            {
                "hyperparameters": {"signing": key},
                "environment": {"TRCOMP_SHARED_CACHE_KEY": key},
            },
            "hyperparameter 'signing' holds a shared cache secret",
        ),
        ({"environment": {"TRCOMP_SHARED_CACHE_KEY": ""}}, "is set but empty"),
    ]
    before = len(moto.json_requests("CreateTrainingJob"))
    for kwargs, says in cases:
        for instance_type in ("ml.g5.xlarge", "local_process"):
            estimator = _estimator(tmp_path, role, OWN, instance_type, **kwargs)
            with pytest.raises(SharedCacheError, match=says) as caught:
                # (process mode always waits; it is refused before anything is created)
                estimator.fit(wait=instance_type == "local_process", job_name="secret-in-hp")
            assert key not in str(caught.value)
    assert len(moto.json_requests("CreateTrainingJob")) == before


def test_a_remote_job_without_a_signing_key_is_warned(moto, role, tmp_path):
    with pytest.warns(CompilerConfigWarning, match="has no signing key"):
        _estimator(tmp_path, role, OWN, "ml.g5.xlarge")
    with warnings.catch_warnings():
        warnings.simplefilter("error", CompilerConfigWarning)
        _estimator(
            tmp_path, role, OWN, "ml.g5.xlarge",
            environment={"TRCOMP_SHARED_CACHE_KEY_SECRET": SECRET_ARN},
        )  # fmt: skip


def test_a_public_bucket_of_the_callers_account_is_refused_before_the_job(moto, role, tmp_path):
    import boto3

    create_bucket("public-team-cache")
    boto3.client("s3").put_bucket_acl(Bucket="public-team-cache", ACL="public-read-write")
    before = len(moto.json_requests("CreateTrainingJob"))
    estimator = _estimator(tmp_path, role, "s3://public-team-cache/c", "ml.g5.xlarge")
    with pytest.raises(SharedCacheError, match="before the job started"):
        estimator.fit(wait=False)
    assert len(moto.json_requests("CreateTrainingJob")) == before


# A hung S3 Control under botocore's defaults (60 s a read, retried) runs past this and
# fails through pytest-timeout; the job's own timeout (1 s) ends it in seconds.
@pytest.mark.timeout(120)
def test_the_accounts_block_public_access_counts_before_the_job(moto, role, tmp_path, monkeypatch):
    import boto3

    create_bucket("acct-public-cache")
    boto3.client("s3").put_bucket_acl(Bucket="acct-public-cache", ACL="public-read-write")
    uri = "s3://acct-public-cache/c"
    s3control = boto3.client("s3control")
    s3control.put_public_access_block(
        AccountId=ACCOUNT, PublicAccessBlockConfiguration={"IgnorePublicAcls": True}
    )
    try:
        # S3 Control does not answer: the bucket's own settings decide, within the timeout.
        with hung_server() as (port, accepted):
            monkeypatch.setenv("AWS_ENDPOINT_URL_S3_CONTROL", f"http://127.0.0.1:{port}")
            estimator = _estimator(tmp_path, role, uri, "ml.g5.xlarge", timeout_s=1, insecure=True)
            with pytest.raises(SharedCacheError, match="grants AllUsers") as caught:
                estimator.fit(wait=False)
        monkeypatch.delenv("AWS_ENDPOINT_URL_S3_CONTROL")
        assert accepted and "Block Public Access settings could not be read" in str(caught.value)
        # S3 Control answers: the account ignores public ACLs, so the job is submitted.
        before = len(moto.json_requests("CreateTrainingJob"))
        _estimator(tmp_path, role, uri, "ml.g5.xlarge", insecure=True).fit(wait=False)
        assert len(moto.json_requests("CreateTrainingJob")) == before + 1
    finally:
        s3control.delete_public_access_block(AccountId=ACCOUNT)


@pytest.mark.parametrize(
    ("opened", "says"),
    [
        ("team-cache", r"team-cache is writable by group or others \("),
        ("shared", r"shared is writable by group or others without the sticky bit"),
    ],
)
def test_a_directory_others_can_write_is_refused_before_a_process_job(
    moto, role, tmp_path, opened, says
):
    shared = tmp_path / "shared" / "team-cache"
    shared.mkdir(parents=True)
    (tmp_path / opened if opened == "shared" else shared).chmod(0o777)
    out = tmp_path / "out"
    estimator = _estimator(
        tmp_path, role, f"file://{shared}", "local_process", output_path=f"file://{out}"
    )
    with pytest.raises(SharedCacheError, match=says):
        estimator.fit(job_name="open-dir")
    assert not out.exists()


def test_local_directories_are_checked_where_they_can_be_used(moto, role, tmp_path):
    blocked = tmp_path / "a-file"
    blocked.write_text("")
    estimator = _estimator(tmp_path, role, f"file://{blocked}/cache", "local_process")
    with pytest.raises(LocalModeError, match=r"shared_cache .* cannot be created"):
        estimator.fit(job_name="unwritable")
    estimator = _estimator(tmp_path, role, f"file://{tmp_path}/cache", "local")
    with pytest.raises(LocalModeError, match="Docker local mode does not mount"):
        estimator.fit(job_name="docker-dir")


def test_a_bucket_another_account_may_write_needs_a_key_before_the_job(moto, role, tmp_path):
    """All four Block Public Access settings on, and a policy letting another account put
    objects: refused at fit() for a job without a key, submitted with one."""
    import boto3

    s3 = boto3.client("s3")
    create_bucket("cross-account-cache")
    statement = {
        "Effect": "Allow",
        "Principal": {"AWS": f"arn:aws:iam::{OTHER_ACCOUNT}:root"},
        "Action": "s3:PutObject",
        "Resource": "arn:aws:s3:::cross-account-cache/*",
    }
    s3.put_bucket_policy(
        Bucket="cross-account-cache", Policy=json.dumps({"Statement": [statement]})
    )
    flags = ("BlockPublicAcls", "IgnorePublicAcls", "BlockPublicPolicy", "RestrictPublicBuckets")
    s3.put_public_access_block(
        Bucket="cross-account-cache", PublicAccessBlockConfiguration=dict.fromkeys(flags, True)
    )
    uri = "s3://cross-account-cache/c"
    before = len(moto.json_requests("CreateTrainingJob"))
    with pytest.raises(SharedCacheError, match="before the job started") as caught:
        _estimator(tmp_path, role, uri, "ml.g5.xlarge", insecure=True).fit(wait=False)
    assert f"arn:aws:iam::{OTHER_ACCOUNT}:root" in str(caught.value)
    assert "Set a key" in str(caught.value) and "lock the bucket" in str(caught.value)
    assert len(moto.json_requests("CreateTrainingJob")) == before
    keyed = {"TRCOMP_SHARED_CACHE_KEY_SECRET": SECRET_ARN}
    _estimator(tmp_path, role, uri, "ml.g5.xlarge", environment=keyed).fit(wait=False)
    assert len(moto.json_requests("CreateTrainingJob")) == before + 1


KEY = "0123456789abcdef" * 4


@pytest.mark.parametrize(
    ("kwargs", "says"),
    [
        # Read from a file: the job strips the newline, and so does the check.
        (
            {
                "environment": {"TRCOMP_SHARED_CACHE_KEY": KEY + "\n"},
                "hyperparameters": {"signing": KEY},
            },
            "hyperparameter 'signing' holds a shared cache secret",
        ),
        (
            {
                "environment": {"TRCOMP_SHARED_CACHE_KEY": f"  {KEY}\r\n"},
                "hyperparameters": {"args": json.dumps({"k": KEY})},
            },
            "hyperparameter 'args' holds a shared cache secret",
        ),
        # Another spelling of the same key: upper case, base64, hex of its bytes.
        (
            {
                "environment": {"TRCOMP_SHARED_CACHE_KEY": KEY},
                "hyperparameters": {"k": KEY.upper()},
            },
            "hyperparameter 'k' holds a shared cache secret",
        ),
        (
            {
                "environment": {"TRCOMP_SHARED_CACHE_KEY": KEY},
                "hyperparameters": {"k": base64.b64encode(KEY.encode()).decode()},
            },
            "hyperparameter 'k' holds a shared cache secret",
        ),
        (
            {
                "environment": {"TRCOMP_SHARED_CACHE_KEY": KEY},
                "hyperparameters": {"k": f"--key={KEY.encode().hex()}"},
            },
            "hyperparameter 'k' holds a shared cache secret",
        ),
        # Near names, in hyperparameters and in the environment.
        ({"hyperparameters": {"MY_TRCOMP_SHARED_CACHE_KEY": KEY}}, "'MY_TRCOMP_SHARED_CACHE_KEY'"),
        ({"hyperparameters": {"shared.cache.key": KEY}}, "hyperparameter 'shared.cache.key'"),
        ({"environment": {"trcomp_shared_cache_key": KEY}}, "'trcomp_shared_cache_key' looks"),
        ({"environment": {"MY_TRCOMP_SHARED_CACHE_KEY": KEY}}, "which no job reads"),
        ({"environment": {"Trcomp_Redis_Password_Secret": SECRET_ARN}}, "under another name"),
        # A key pasted where the secret's name or ARN goes.
        ({"environment": {"TRCOMP_SHARED_CACHE_KEY_SECRET": KEY}}, "looks like key material"),
        (
            {"environment": {"TRCOMP_SHARED_CACHE_KEY_SECRET": "q3Z9k2Lm0Rt7Xw4Yb8Nc1Vd6Hs5Jf3Gp"}},
            "looks like key material",
        ),
        (
            {"environment": {"TRCOMP_SHARED_CACHE_KEY_SECRET": KEY + "\n"}},
            "is not a secret's name or ARN",
        ),
        (
            {"environment": {"TRCOMP_REDIS_PASSWORD_SECRET": "correct horse battery"}},
            "TRCOMP_REDIS_PASSWORD_SECRET must name a secret",
        ),
    ],
)
def test_a_stripped_key_a_near_name_or_a_pasted_key_never_reaches_a_job(
    moto, role, tmp_path, kwargs, says
):
    before = len(moto.json_requests("CreateTrainingJob"))
    values = [*kwargs.get("environment", {}).values(), KEY]
    for instance_type in ("ml.g5.xlarge", "local_process"):
        out = tmp_path / "out"
        local = {"output_path": f"file://{out}"} if instance_type == "local_process" else {}
        estimator = _estimator(tmp_path, role, OWN, instance_type, **local, **kwargs)
        with pytest.raises(SharedCacheError, match=says) as caught:
            estimator.fit(wait=instance_type == "local_process", job_name="near-key")
        message = str(caught.value)
        assert not [v for v in values if v.strip() in message], message  # never echoed
        assert not out.exists()
    assert len(moto.json_requests("CreateTrainingJob")) == before


@pytest.mark.parametrize(
    "reference", [SECRET_ARN, "team/trcomp-cache-key", "TrcompSharedCacheKey2024", "prod_key.v2"]
)
def test_a_secret_name_or_arn_is_submitted_as_it_is(moto, role, tmp_path, reference):
    environment = {"TRCOMP_SHARED_CACHE_KEY_SECRET": reference}
    name = f"secret-ref-{abs(hash(reference)) % 10_000}"
    _estimator(tmp_path, role, OWN, "ml.g5.xlarge", environment=environment).fit(
        wait=False, job_name=name
    )
    (sent,) = [r for r in moto.json_requests("CreateTrainingJob") if r["TrainingJobName"] == name]
    assert sent["Environment"]["TRCOMP_SHARED_CACHE_KEY_SECRET"] == reference


@pytest.mark.parametrize(
    ("uri", "trusting"),
    [
        (OWN, "every principal that IAM, the bucket policy or an ACL lets write"),
        ("redis://127.0.0.1:6379", "everyone who can reach the Redis and holds its password"),
    ],
)
def test_a_keyless_s3_or_redis_team_cache_is_refused_at_fit_with_the_fix(
    moto, role, tmp_path, uri, trusting
):
    """Issue 43, part 3: a team cache whose writers the job cannot check on its own machine
    needs the team's key. Process mode: refused before any job folder exists; SageMaker:
    before any upload. With the key, or with shared_cache_insecure=True, it goes on."""
    out = tmp_path / "out"
    process = _estimator(tmp_path, role, uri, "local_process", output_path=f"file://{out}")
    with pytest.raises(SharedCacheError, match="has no key") as caught:
        process.fit(job_name="keyless-team-cache")
    message = str(caught.value)
    assert trusting in message and "before the job started" in message
    assert "environment={'TRCOMP_SHARED_CACHE_KEY': ...}" in message
    assert "environment={'TRCOMP_SHARED_CACHE_KEY_SECRET': '<secret ARN>'}" in message
    assert "shared_cache_insecure=True" in message
    assert not out.exists()  # no job folder: nothing was created

    before = len(moto.json_requests("CreateTrainingJob"))
    puts = len([r for r in moto.requests() if r["method"] == "PUT"])
    remote_uri, env = uri, {}
    if uri.startswith("redis"):  # a SageMaker job's Redis needs TLS and a password anyway
        remote_uri, env = (
            "rediss://cache.internal:6379",
            {"TRCOMP_REDIS_PASSWORD_SECRET": SECRET_ARN},
        )
    remote = _estimator(tmp_path, role, remote_uri, "ml.g5.xlarge", environment=env)
    with pytest.raises(SharedCacheError, match="has no key"):
        remote.fit(wait=False)
    assert len(moto.json_requests("CreateTrainingJob")) == before
    assert len([r for r in moto.requests() if r["method"] == "PUT"]) == puts  # no upload

    if uri == OWN:
        keyed = {KEY_SECRET_ENV: KEY_ARN}
        _estimator(tmp_path, role, uri, "ml.g5.xlarge", environment=keyed).fit(wait=False)
        assert len(moto.json_requests("CreateTrainingJob")) == before + 1
