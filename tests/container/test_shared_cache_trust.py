"""Who may write the shared compile cache, and what an entry may hold.

Real archives in real directories, a moto S3 server (bucket policies, ACLs,
Block Public Access, Secrets Manager). An entry from another writer (no key,
another key, a location others can write) is never unpacked; an entry that
unpacks to too much, or names a file twice, moves nothing into the live cache.
"""

from __future__ import annotations

import hashlib
import io
import json
import os
import tarfile
import time
from pathlib import Path

import pytest

from tests.helpers.aws import (
    ACCOUNT,
    aws_environment,
    aws_error_server,
    create_bucket,
    moto_server,
    s3control_resolves,
)
from tests.helpers.hung_server import until_reached
from trcomp.contract import owned_dirs
from trcomp.contract.errors import SharedCacheError
from trcomp_container.caching.compat import compat_set
from trcomp_container.caching.entry import entry_name
from trcomp_container.caching.shared import NAMED_SKIPS, open_shared_cache

KEY = "team-a-key-0123456789abcdef"
OTHER_KEY = "team-b-key-0123456789abcdef"
COMPAT = compat_set(engine="inductor", gpu_listing=None)


def _live_with(base: Path, files: dict[str, bytes]) -> Path:
    live = base / "live"
    for name, body in files.items():
        (live / name).parent.mkdir(parents=True, exist_ok=True)
        (live / name).write_bytes(body)
    return live


def _open(uri: str, live: Path, key: str | None = None, **kwargs):
    environ = dict(kwargs.pop("environ", {}))
    if key:
        environ["TRCOMP_SHARED_CACHE_KEY"] = key
    # An S3 or Redis job without a key trusts the location only when opted in, as
    # TrainingCompilerConfig(shared_cache_insecure=True) does (a file:// never needs it).
    kwargs.setdefault("insecure", not key)
    return open_shared_cache(
        uri, compat=COMPAT, engine="inductor", live=live, environ=environ, remote_job=False,
        **kwargs,
    )  # fmt: skip


def _files(live: Path) -> list[Path]:
    return [p for p in live.rglob("*") if p.is_file()] if live.exists() else []


def _plant(store: Path, members: list[tuple[str, bytes]], *, key: str | None = None) -> Path:
    """Write an entry by hand (what someone with write access to the location could do)."""
    manifest = {"format": 1, "key": COMPAT.key, "files": {n: len(b) for n, b in members}}
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w:gz") as tar:
        for name, body in [("manifest.json", json.dumps(manifest).encode())] + [
            (f"files/{n}", b) for n, b in members
        ]:
            info = tarfile.TarInfo(name)
            info.size = len(body)
            tar.addfile(info, io.BytesIO(body))
    data = buffer.getvalue()
    digest = hashlib.sha256(data).hexdigest()
    store.mkdir(parents=True, exist_ok=True)
    path = store / entry_name(digest, COMPAT.key, key.encode() if key else None)
    path.write_bytes(data)
    return path


def test_a_signed_entry_is_read_with_the_key_and_refused_with_another_or_none(tmp_path):
    uri = f"file://{tmp_path / 'shared'}"
    live = _live_with(tmp_path / "a", {"inductor/fxgraph/g1": b"graph"})
    writer = _open(uri, live, KEY)
    assert writer.facts["signed"] is True
    assert writer.finish(live, succeeded=True)["files_written"] == 1
    (entry,) = (tmp_path / "shared" / COMPAT.key).iterdir()
    assert entry.name.count("-") == 2  # <time>-<sha256>-<signature>.tar.gz

    same_team = _open(uri, tmp_path / "b" / "live", KEY)
    assert same_team.facts["files_read"] == 1 and same_team.warm

    other_team = _open(uri, tmp_path / "c" / "live", OTHER_KEY)
    assert other_team.facts["entries_skipped"] == 1 and not other_team.warm
    assert "signature is not this job's key's" in other_team.warnings[0]
    assert _files(tmp_path / "c" / "live") == []

    # Without a key a job trusts the location: it reads the signed entry too.
    assert _open(uri, tmp_path / "d" / "live").facts["files_read"] == 1


def test_an_entry_planted_without_the_key_is_never_unpacked(tmp_path):
    store = tmp_path / "shared" / COMPAT.key
    planted = _plant(store, [("inductor/fxgraph/evil", b"import os  # planted")])
    forged = planted.with_name(planted.name.replace(".tar.gz", "-" + "0" * 64 + ".tar.gz"))
    _plant(store, [("inductor/fxgraph/evil2", b"planted")]).rename(forged)  # wrong signature

    cache = _open(f"file://{tmp_path / 'shared'}", tmp_path / "r" / "live", KEY)
    assert cache.facts["entries_found"] == 2 and cache.facts["entries_skipped"] == 2
    assert cache.facts["files_read"] == 0 and not cache.warm
    assert any("not signed" in w for w in cache.warnings)
    assert any("signature is not this job's key's" in w for w in cache.warnings)
    assert _files(tmp_path / "r" / "live") == []


def test_a_signed_entry_moved_to_another_compatibility_set_is_refused_by_its_signature(tmp_path):
    other = compat_set(engine="inductor", gpu_listing="GPU 0: NVIDIA A10G (UUID: GPU-1)")
    live = _live_with(tmp_path / "a", {"inductor/g": b"x"})
    open_shared_cache(
        f"file://{tmp_path / 'shared'}", compat=other, engine="inductor", live=live,
        environ={"TRCOMP_SHARED_CACHE_KEY": KEY}, remote_job=False,
    ).finish(live, succeeded=True)  # fmt: skip
    (entry,) = (tmp_path / "shared" / other.key).iterdir()
    (tmp_path / "shared" / COMPAT.key).mkdir()
    entry.rename(tmp_path / "shared" / COMPAT.key / entry.name)
    cache = _open(f"file://{tmp_path / 'shared'}", tmp_path / "b" / "live", KEY)
    assert cache.facts["entries_skipped"] == 1 and "signature" in cache.warnings[0]


def test_a_short_key_is_a_config_error(tmp_path):
    with pytest.raises(SharedCacheError, match="at least 16"):
        _open(f"file://{tmp_path / 'shared'}", tmp_path / "live", "short")


@pytest.mark.parametrize(
    ("setup", "says"),
    [
        ("group-writable", r"shared is writable by group or others"),
        ("other-owner", r"shared is owned by uid 4242"),
        ("open-parent", r"parent is writable by group or others without the sticky bit"),
        ("group-parent", r"parent is writable by group or others without the sticky bit"),
        ("open-grandparent", r"above is writable by group or others without the sticky bit"),
        ("foreign-parent", r"parent is owned by uid 4242, neither this user nor root"),
        ("foreign-sticky-parent", r"parent is owned by uid 4242"),
    ],
)
def test_a_directory_someone_else_can_write_or_swap_is_refused(tmp_path, setup, says):
    """Whoever can write a directory above the cache can rename it away and put theirs there."""
    if ("owner" in setup or "foreign" in setup) and os.geteuid() != 0:
        pytest.skip("giving a directory to another user needs root")
    shared = tmp_path / "above" / "parent" / "shared"
    shared.mkdir(parents=True)
    parent = shared.parent
    if setup == "group-writable":
        shared.chmod(0o775)
    elif setup == "other-owner":
        os.chown(shared, 4242, -1)
    elif setup == "open-parent":
        parent.chmod(0o777)  # no sticky bit: anyone may swap "shared" for their own
    elif setup == "group-parent":
        parent.chmod(0o775)
    elif setup == "open-grandparent":
        parent.parent.chmod(0o777)  # anyone may swap "parent", and "shared" with it
    elif setup == "foreign-parent":
        os.chown(parent, 4242, -1)  # its owner may swap "shared", whatever the mode
    else:
        parent.chmod(0o1777)  # sticky, but its owner may still rename what is in it
        os.chown(parent, 4242, -1)
    with pytest.raises(SharedCacheError, match=says) as caught:
        _open(f"file://{shared}", tmp_path / "live")
    assert "a compile cache is code" in str(caught.value)
    assert _files(tmp_path / "live") == []


def test_a_cache_behind_a_symlink_is_checked_where_it_really_is(tmp_path):
    real = tmp_path / "open" / "team"
    real.mkdir(parents=True)
    real.parent.chmod(0o777)
    safe = tmp_path / "safe"
    safe.mkdir()
    (safe / "link").symlink_to(real)
    with pytest.raises(SharedCacheError, match=r"open is writable by group or others"):
        _open(f"file://{safe / 'link'}", tmp_path / "live")


def test_a_directory_under_a_sticky_shared_parent_is_accepted(tmp_path):
    parent = tmp_path / "tmp-like"
    parent.mkdir()
    parent.chmod(0o1777)
    live = _live_with(tmp_path / "a", {"inductor/g": b"x"})
    cache = _open(f"file://{parent / 'team'}", live)
    assert cache.finish(live, succeeded=True)["files_written"] == 1
    assert (parent / "team" / COMPAT.key).stat().st_mode & 0o022 == 0


def test_a_root_owned_parent_is_accepted_for_another_user(tmp_path, monkeypatch):
    """Root's directories above the cache are fine (as /srv or /mnt are): only root could swap."""
    if os.geteuid() != 0:
        pytest.skip("making a directory another user's needs root")
    shared = tmp_path / "team"
    shared.mkdir()
    os.chown(shared, 4242, -1)
    monkeypatch.setattr(owned_dirs, "_uid", lambda: 4242)  # the check, as user 4242
    owned_dirs.check_directory(shared, where="in the job")
    os.chown(tmp_path, 4343, -1)
    with pytest.raises(SharedCacheError, match="owned by uid 4343, neither this user nor root"):
        owned_dirs.check_directory(shared, where="in the job")


def test_the_read_limit_counts_unpacked_bytes(tmp_path):
    store = tmp_path / "shared" / COMPAT.key
    bomb = _plant(store, [("inductor/big", b"\0" * (8 << 20))])
    assert bomb.stat().st_size < 64 << 10  # 8 MiB of zeros packs to a few KiB
    limit = {"TRCOMP_SHARED_CACHE_MAX_READ_BYTES": str(1 << 20)}
    cache = _open(f"file://{tmp_path / 'shared'}", tmp_path / "r" / "live", environ=limit)
    assert cache.facts["entries_skipped"] == 1 and cache.facts["bytes_read"] == 0
    assert "unpacks to more than" in cache.warnings[0]
    assert _files(tmp_path / "r" / "live") == []
    roomy = {"TRCOMP_SHARED_CACHE_MAX_READ_BYTES": str(16 << 20)}
    cache = _open(f"file://{tmp_path / 'shared'}", tmp_path / "s" / "live", environ=roomy)
    assert cache.facts["bytes_read"] == 8 << 20  # unpacked bytes, not the archive's


def test_a_huge_newest_entry_and_junk_names_crowd_out_no_good_entry(tmp_path):
    """A keyed job reads the good entry whatever is listed before it: a signed entry dated
    a minute ahead (clocks differ) and listed at 64 MiB, over the read limit, and 30
    unsigned names listed after it; the warnings name the first few skipped and count the rest.
    (A signed entry dated 2100 is refused for its time: test_signing.py.)"""
    store = tmp_path / "shared" / COMPAT.key
    _plant(store, [("inductor/good", b"compiled")], key=KEY)
    ahead = time.time() + 60
    huge = store / entry_name("f" * 64, COMPAT.key, KEY.encode(), when=ahead)
    with huge.open("wb") as handle:
        handle.truncate(64 << 20)  # sparse: listed at 64 MiB
    for index in range(30):
        junk = entry_name(f"{index:064x}", COMPAT.key, None, when=ahead - 1 - index)
        (store / junk).write_bytes(b"junk")
    limit = {"TRCOMP_SHARED_CACHE_MAX_READ_BYTES": str(1 << 20)}
    cache = _open(f"file://{tmp_path / 'shared'}", tmp_path / "r" / "live", KEY, environ=limit)
    assert cache.facts["entries_read"] == 1 and cache.facts["files_read"] == 1
    assert cache.facts["entries_skipped"] == 31 and cache.facts["bytes_read"] == len(b"compiled")
    assert "more than what is left of the read limit" in cache.warnings[0]
    assert len(cache.warnings) == NAMED_SKIPS + 1
    assert cache.warnings[-1].startswith(f"{31 - NAMED_SKIPS} more shared compile cache entries")


def test_a_location_made_under_umask_002_is_the_users_alone(tmp_path):
    uri = f"file://{tmp_path / 'team' / 'cache'}"  # neither directory exists yet
    previous = os.umask(0o002)
    try:
        live = _live_with(tmp_path / "a", {"inductor/g": b"graph"})
        assert _open(uri, live, KEY).finish(live, succeeded=True)["files_written"] == 1
    finally:
        os.umask(previous)
    for made in (tmp_path / "team", tmp_path / "team" / "cache"):
        assert made.stat().st_mode & 0o777 == 0o700, oct(made.stat().st_mode)
    assert _open(uri, tmp_path / "b" / "live", KEY).facts["files_read"] == 1  # not refused


def test_an_entry_that_conflicts_with_the_live_cache_moves_nothing(tmp_path):
    store = tmp_path / "shared" / COMPAT.key
    _plant(store, [("inductor/a", b"1"), ("inductor/b/c", b"2")])
    live = _live_with(tmp_path / "r", {"inductor/b": b"a file where the entry has a folder"})
    cache = _open(f"file://{tmp_path / 'shared'}", live)
    assert sorted(str(p.relative_to(live)) for p in _files(live)) == ["inductor/b"]
    assert cache.facts["entries_skipped"] == 1 and "nothing was moved" in cache.warnings[0]


def test_a_dead_writers_partial_file_is_removed(tmp_path):
    from trcomp_container.caching.stores import STALE_PARTIAL_S

    store = tmp_path / "shared" / COMPAT.key
    _plant(store, [("inductor/g", b"graph")])
    old, fresh = store / ".partial-dead", store / ".partial-writing"
    for partial in (old, fresh):
        partial.write_bytes(b"half an entry")
    hours_ago = time.time() - STALE_PARTIAL_S - 60
    os.utime(old, (hours_ago, hours_ago))
    cache = _open(f"file://{tmp_path / 'shared'}", tmp_path / "r" / "live")
    assert cache.facts["entries_found"] == 1 and cache.facts["files_read"] == 1
    assert not old.exists() and fresh.exists()  # one may still be being written


def test_an_entry_naming_a_file_twice_moves_nothing(tmp_path):
    store = tmp_path / "shared" / COMPAT.key
    _plant(store, [("inductor/a", b"1"), ("inductor/b", b"2"), ("inductor/./a", b"1")])
    live = _live_with(tmp_path / "r", {"inductor/kept": b"mine"})
    cache = _open(f"file://{tmp_path / 'shared'}", live)
    assert cache.facts["entries_skipped"] == 1 and "inductor/a twice" in cache.warnings[0]
    assert sorted(p.name for p in _files(live)) == ["kept"]


@pytest.mark.parametrize("value", ["4GiB", "-1", "1e9"])
def test_a_malformed_read_limit_is_the_config_error(tmp_path, value):
    with pytest.raises(SharedCacheError, match="TRCOMP_SHARED_CACHE_MAX_READ_BYTES") as caught:
        _open(
            f"file://{tmp_path / 'shared'}",
            tmp_path / "live",
            environ={"TRCOMP_SHARED_CACHE_MAX_READ_BYTES": value},
        )
    assert "whole number" in str(caught.value)


def test_only_the_first_host_writes_the_jobs_entry(tmp_path):
    uri = f"file://{tmp_path / 'shared'}"
    live = _live_with(tmp_path / "a", {"inductor/g": b"x"})
    facts = _open(uri, live, writer=False).finish(live, succeeded=True)
    assert facts["files_written"] == 0 and "first host" in facts["not_written"]
    # The location is the job's from the start (created, checked and kept open), but empty.
    assert list((tmp_path / "shared" / COMPAT.key).iterdir()) == []


def test_the_writer_is_the_first_of_the_sorted_hosts(tmp_path):
    from trcomp.contract.config import TrainingCompilerConfig
    from trcomp_container.caching import job_setup
    from trcomp_container.devices import Devices
    from trcomp_container.job import Job, JobPaths

    config = TrainingCompilerConfig(backend="inductor", shared_cache=f"file://{tmp_path / 's'}")
    written = {}
    for host in ("algo-2", "algo-1"):
        job = Job(
            paths=JobPaths.under(tmp_path / host),
            framework_params={},
            user_args=[],
            toolkit_env={},
            entry_point="train.py",
            module_dir="",
            hosts=["algo-2", "algo-1"],
            current_host=host,
            num_gpus=0,
            num_cpus=2,
            instance_type="local_process",
        )
        live = tmp_path / host / "live"
        cache = job_setup.open_for_job(config, job, Devices(), live, engine="inductor")
        assert cache is not None
        written[host] = cache.writer
    assert written == {"algo-1": True, "algo-2": False}


@pytest.fixture(scope="module")
def moto(tmp_path_factory):
    with (
        moto_server(tmp_path_factory.mktemp("moto")) as server,
        aws_environment(server.url),
        s3control_resolves(),
    ):
        yield server


@pytest.fixture
def account_block(moto):
    """Set the account's Block Public Access (S3 Control) for one test; removed after."""
    import boto3

    s3control = boto3.client("s3control")

    def put(*flags: str) -> None:
        s3control.put_public_access_block(
            AccountId=ACCOUNT,
            PublicAccessBlockConfiguration={flag: flag in flags for flag in BLOCK_FLAGS},
        )

    yield put
    s3control.delete_public_access_block(AccountId=ACCOUNT)


BLOCK_FLAGS = ("BlockPublicAcls", "IgnorePublicAcls", "BlockPublicPolicy", "RestrictPublicBuckets")


def _public_write_policy(bucket: str) -> str:
    statement = {
        "Effect": "Allow",
        "Principal": "*",
        "Action": "s3:PutObject",
        "Resource": f"arn:aws:s3:::{bucket}/*",
    }
    return json.dumps({"Version": "2012-10-17", "Statement": [statement]})


def test_a_public_bucket_of_the_jobs_own_account_is_refused(moto, tmp_path):
    import boto3

    s3 = boto3.client("s3")
    create_bucket("open-policy-cache")
    s3.put_bucket_policy(
        Bucket="open-policy-cache", Policy=_public_write_policy("open-policy-cache")
    )
    create_bucket("open-acl-cache")
    s3.put_bucket_acl(Bucket="open-acl-cache", ACL="public-read-write")
    for bucket, says in (("open-policy-cache", "policy is public"), ("open-acl-cache", "AllUsers")):
        with pytest.raises(SharedCacheError, match=says) as caught:
            _open(f"s3://{bucket}/compile", tmp_path / bucket)
        assert "Block Public Access" in str(caught.value)

    create_bucket("blocked-cache")
    s3.put_bucket_policy(Bucket="blocked-cache", Policy=_public_write_policy("blocked-cache"))
    s3.put_public_access_block(
        Bucket="blocked-cache",
        PublicAccessBlockConfiguration=dict.fromkeys(BLOCK_FLAGS, True),
        ExpectedBucketOwner=ACCOUNT,
    )
    assert _open("s3://blocked-cache/compile", tmp_path / "ok").facts["entries_found"] == 0


def _public_buckets() -> dict[str, str]:
    """A bucket with a public policy and one with a public ACL: what each refusal says."""
    import boto3

    s3 = boto3.client("s3")
    for bucket in ("acct-policy-cache", "acct-acl-cache"):
        if bucket not in {b["Name"] for b in s3.list_buckets()["Buckets"]}:
            create_bucket(bucket)
    s3.put_bucket_policy(
        Bucket="acct-policy-cache", Policy=_public_write_policy("acct-policy-cache")
    )
    s3.put_bucket_acl(Bucket="acct-acl-cache", ACL="public-read-write")
    return {"acct-policy-cache": "policy is public", "acct-acl-cache": "grants AllUsers"}


def test_the_accounts_block_public_access_makes_a_public_bucket_private(
    moto, account_block, tmp_path
):
    """S3 enforces the stricter of the bucket's and the account's settings."""
    buckets = _public_buckets()
    # Blocking new public policies and ACLs leaves the existing ones in force.
    account_block("BlockPublicAcls", "BlockPublicPolicy")
    for bucket, says in buckets.items():
        with pytest.raises(SharedCacheError, match=says) as caught:
            _open(f"s3://{bucket}/compile", tmp_path / bucket)
        assert "or of the account (aws s3control put-public-access-block)" in str(caught.value)
        assert "could not be read" not in str(caught.value)
    # RestrictPublicBuckets: only the account's own principals get in through a policy.
    account_block("RestrictPublicBuckets")
    assert _open("s3://acct-policy-cache/c", tmp_path / "p1").facts["entries_found"] == 0
    with pytest.raises(SharedCacheError, match="grants AllUsers"):
        _open("s3://acct-acl-cache/c", tmp_path / "a1")
    # IgnorePublicAcls: S3 ignores every public ACL of the account's buckets.
    account_block("IgnorePublicAcls", "RestrictPublicBuckets")
    for bucket in buckets:
        assert _open(f"s3://{bucket}/c", tmp_path / f"{bucket}-2").facts["entries_found"] == 0


def test_without_the_accounts_settings_the_buckets_own_decide(
    moto, account_block, tmp_path, monkeypatch
):
    """Denied or unreachable S3 Control: the public bucket is refused, and the message says why."""
    _public_buckets()
    account_block(*BLOCK_FLAGS)  # what the job would see, could it read them
    with aws_error_server() as refusing:
        refusing.status, refusing.code, refusing.message = 403, "AccessDenied", "denied"
        monkeypatch.setenv("AWS_ENDPOINT_URL_S3_CONTROL", refusing.url)
        with pytest.raises(SharedCacheError, match="grants AllUsers") as caught:
            _open("s3://acct-acl-cache/c", tmp_path / "denied")
        assert refusing.received, "S3 Control was never asked"
    assert "(s3:GetAccountPublicAccessBlock was denied)" in str(caught.value)

    def attempt(port: int, budget: float):
        monkeypatch.setenv("AWS_ENDPOINT_URL_S3_CONTROL", f"http://127.0.0.1:{port}")
        return _open("s3://acct-policy-cache/c", tmp_path / f"hung-{budget:g}", timeout_s=budget)

    cache, _ = until_reached(attempt)  # S3 Control was asked, and never answered
    # The job stops waiting at its budget and starts cold: nothing read, nothing to write.
    assert cache.facts["read_budget_hit"] is True and cache.store is None


def test_the_key_can_come_from_secrets_manager(moto, tmp_path):
    import boto3

    create_bucket("signed-cache")
    arn = boto3.client("secretsmanager").create_secret(Name="team-key", SecretString=KEY)["ARN"]
    environ = {"TRCOMP_SHARED_CACHE_KEY_SECRET": arn}
    uri = "s3://signed-cache/compile"
    live = _live_with(tmp_path / "a", {"inductor/g": b"graph"})
    writer = _open(uri, live, environ=environ)
    assert writer.facts["signed"] is True
    assert writer.finish(live, succeeded=True)["files_written"] == 1
    assert _open(uri, tmp_path / "b" / "live", KEY).facts["files_read"] == 1  # the same key
    assert _open(uri, tmp_path / "c" / "live", OTHER_KEY).facts["files_read"] == 0
    # A key pasted where the secret's name goes: refused, and never repeated.
    pasted = "0123456789abcdef" * 4
    with pytest.raises(SharedCacheError, match="cannot read the secret") as caught:
        _open(uri, tmp_path / "d", environ={"TRCOMP_SHARED_CACHE_KEY_SECRET": pasted})
    assert pasted not in str(caught.value) and "never the secret itself" in str(caught.value)
    with pytest.raises(SharedCacheError, match="TRCOMP_SHARED_CACHE_KEY is set but empty"):
        _open(uri, tmp_path / "e", environ={"TRCOMP_SHARED_CACHE_KEY": " "})


def test_a_keyless_s3_or_redis_cache_is_refused_in_the_job(moto, tmp_path):
    """A job started without the SDK's check: refused before the store is opened, unless
    the config opts in (shared_cache_insecure=True); with the key, opened and signed."""
    create_bucket("keyless-cache")
    for uri in ("s3://keyless-cache/compile", "redis://127.0.0.1:6379"):
        with pytest.raises(SharedCacheError, match="has no key") as caught:
            _open(uri, tmp_path / "live", insecure=False)
        assert "in the job" in str(caught.value) and "shared_cache_insecure" in str(caught.value)
    assert _files(tmp_path / "live") == []
    assert _open("s3://keyless-cache/compile", tmp_path / "k", KEY).facts["signed"] is True
    opted_in = _open("s3://keyless-cache/compile", tmp_path / "o", insecure=True)
    assert opted_in.facts["signed"] is False


def test_a_planted_entry_name_with_a_newline_adds_no_line_to_the_log(tmp_path):
    store = tmp_path / "shared" / COMPAT.key
    _plant(store, [("inductor/good", b"compiled")], key=KEY)
    (store / f"{'0' * 8}T000000Z-x\nERROR: forged line.tar.gz").write_bytes(b"junk")
    cache = _open(f"file://{tmp_path / 'shared'}", tmp_path / "r" / "live", KEY)
    assert cache.facts["entries_read"] == 1
    assert cache.warnings and all("\n" not in warning for warning in cache.warnings)
    assert any("x\\nERROR: forged line" in warning for warning in cache.warnings)
