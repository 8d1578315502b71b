"""A shared cache that hangs or refuses never makes a job wait; Redis with a password and TLS.

The hung stores are real: a socket that accepts and never answers (an S3
endpoint, a Redis), and a FIFO no one writes to (a file system that stopped
answering: the read blocks in the kernel, where no timeout reaches). The
budget being reported as hit and the read reporting nothing are what is
asserted; no wall time is. A job that waited on the hung store would hang the
test instead, which pytest-timeout stops (``HANG_S``).
"""

from __future__ import annotations

import contextlib
import json
import os
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.helpers.aws import aws_environment, create_bucket, moto_server
from tests.helpers.hung_server import hung_server, until_reached
from tests.helpers.redis_server import redis_server
from trcomp.contract.env import REDIS_PASSWORD_ENV, REDIS_URL_ENV, TORCH_REMOTE_CACHE_ENV
from trcomp.contract.errors import SharedCacheError
from trcomp_container.caching.compat import compat_set
from trcomp_container.caching.shared import open_shared_cache
from trcomp_container.caching.stores import DirectoryStore, Listed
from trcomp_container.inprocess.redis_handoff import RedisHandoff

COMPAT = compat_set(engine="inductor", gpu_listing=None)
BUDGET_S = 1.0
PASSWORD = "redis-pw-4f1c2e"
KEY_ENV = "TRCOMP_SHARED_CACHE_KEY"


def _open(uri: str, live: Path, *, remote_job: bool = False, **kwargs):
    kwargs.setdefault("timeout_s", BUDGET_S)
    environ = kwargs.pop("environ", {})
    # A job without a key uses an S3 or Redis cache only when opted in, as
    # TrainingCompilerConfig(shared_cache_insecure=True) does.
    kwargs.setdefault("insecure", KEY_ENV not in environ)
    return open_shared_cache(
        uri, compat=COMPAT, engine="inductor", live=live, remote_job=remote_job,
        environ=environ, **kwargs,
    )  # fmt: skip


# A test still running after this waited on the hung store: failed. It leaves room for
# until_reached's three budgets (8 + 20 + 45 s) on a machine too loaded for the first.
HANG_S = 120


@pytest.mark.timeout(HANG_S)
def test_an_s3_endpoint_that_never_answers_makes_the_job_start_cold(tmp_path):
    def attempt(port: int, budget: float):
        with aws_environment(f"http://127.0.0.1:{port}"):
            return _open("s3://team-cache/compile", tmp_path / f"live-{budget:g}", timeout_s=budget)

    cache, budget = until_reached(attempt)
    assert cache.facts["read_budget_hit"] is True
    assert cache.facts["entries_read"] == 0 and cache.warm is False and cache.store is None
    assert f"shared_cache_timeout_s={budget:g}" in cache.warnings[0]
    assert cache.finish(tmp_path / f"live-{budget:g}", succeeded=True).get("files_written") is None


@pytest.fixture
def fifo(tmp_path: Path) -> Iterator[Path]:
    """A FIFO whose reader blocks until a writer comes; released at the end of the test."""
    path = tmp_path / "hung-mount"
    os.mkfifo(path)
    yield path
    for _ in range(50):  # let every thread left reading it see an end of file
        try:
            os.close(os.open(path, os.O_WRONLY | os.O_NONBLOCK))
        except OSError:  # ENXIO: no one has it open for reading any more
            break
        time.sleep(0.05)


@pytest.mark.timeout(HANG_S)
def test_a_directory_store_that_blocks_makes_the_job_start_cold(tmp_path, fifo, monkeypatch):
    uri = f"file://{tmp_path / 'shared'}"
    live = tmp_path / "a" / "live"
    (live / "inductor").mkdir(parents=True)
    (live / "inductor" / "g").write_bytes(b"graph")
    _open(uri, live).finish(live, succeeded=True)  # one good entry

    def blocked_get(self: DirectoryStore, listed: Listed, dest: Path, *, stop) -> None:
        with fifo.open("rb") as hung:  # blocks: no writer, as a dead NFS server's read
            dest.write_bytes(hung.read())

    monkeypatch.setattr(DirectoryStore, "get", blocked_get)
    reader = tmp_path / "b" / "live"
    cache = _open(uri, reader)
    assert cache.facts["read_budget_hit"] is True and cache.facts["entries_found"] == 1
    assert cache.facts["entries_read"] == 0 and cache.warm is False
    assert not [p for p in reader.rglob("*") if p.is_file()]

    def blocked_put(self: DirectoryStore, name: str, source: Path, commit) -> None:
        with fifo.open("rb"):
            pass

    monkeypatch.setattr(DirectoryStore, "put", blocked_put)
    (reader / "inductor").mkdir(parents=True, exist_ok=True)
    (reader / "inductor" / "new").write_bytes(b"compiled here")
    facts = cache.finish(reader, succeeded=True)
    assert facts["write_budget_hit"] is True and facts["files_written"] == 0
    assert threading.active_count() >= 2  # the abandoned reads are still blocked, not waited on


@pytest.mark.timeout(HANG_S)
def test_a_write_past_its_budget_never_appears(tmp_path, fifo, monkeypatch):
    """The budget stops the wait and the write: the copy blocked past it, then went on,
    and no entry (nor its partial file) is left in the store."""
    from trcomp_container.caching import dir_store

    uri = f"file://{tmp_path / 'shared'}"
    live = tmp_path / "a" / "live"
    (live / "inductor").mkdir(parents=True)
    (live / "inductor" / "g").write_bytes(b"graph")
    writer = _open(uri, live)
    copy = dir_store.shutil.copyfileobj
    copies: list[int] = []

    def stalled_copy(source, target):
        with fifo.open("rb"):  # blocks until the test releases it, past the budget
            pass
        copies.append(target.fileno())
        return copy(source, target)

    monkeypatch.setattr(dir_store.shutil, "copyfileobj", stalled_copy)
    facts = writer.finish(live, succeeded=True)
    assert facts["write_budget_hit"] is True and facts["files_written"] == 0
    os.close(os.open(fifo, os.O_WRONLY))  # the stalled copy goes on now
    for thread in threading.enumerate():  # until the abandoned write has ended
        if thread.name == "trcomp-shared-write":
            thread.join(HANG_S / 2)
    store = tmp_path / "shared" / COMPAT.key
    assert copies and list(store.iterdir()) == []


@pytest.mark.timeout(HANG_S)
def test_a_redis_that_never_answers_leaves_the_remote_caches_off(tmp_path):
    cache, _ = until_reached(
        lambda port, budget: _open(
            f"redis://127.0.0.1:{port}", tmp_path / f"live-{budget:g}", timeout_s=budget
        )
    )
    assert cache.environment == {} and cache.facts["remote_cache"] is False
    assert cache.warm is False and "without inductor's remote caches" in cache.warnings[0]


def test_a_redis_that_refuses_connections_leaves_the_remote_caches_off(tmp_path):
    with hung_server() as (port, _):
        pass  # closed: nothing listens on the port any more
    cache = _open(f"redis://127.0.0.1:{port}", tmp_path / "live")
    assert not [k for k in cache.environment if k.startswith(("TORCHINDUCTOR_", "TORCH_DYNAMO"))]
    assert "ConnectionError" in cache.warnings[0]


def _round_trip_through_inductors_backend(environment: dict[str, str]) -> None:
    """Inductor's own Redis backend, guarded as the start-up hook guards it in the user's
    process, stores and reads an entry with the job's variables (``environment``)."""
    from torch._inductor import remote_cache

    from trcomp_container.inprocess.patches import redis_backend

    warned: list[str] = []
    handoff = RedisHandoff.from_env(environment)
    undo = redis_backend.install(
        remote_cache, redis_backend.RedisGuard(warned.append, handoff=handoff)
    )
    assert undo is not None
    try:
        backend = remote_cache.RedisRemoteCacheBackend("trcomp-test")
        backend.put("pt2:trcomp-test", b"compiled")
        assert backend.get("pt2:trcomp-test") == b"compiled", warned
    finally:
        undo()


@contextlib.contextmanager
def trickling_redis(reply: bytes, every_s: float) -> Iterator[tuple[int, list[int]]]:
    """A fake Redis: set-up commands answered at once, a GET's ``reply`` one byte every
    ``every_s`` seconds (each read in time for the socket timeout); yields its port and
    the count of reply bytes sent so far."""
    server = socket.create_server(("127.0.0.1", 0))
    sent = [0]
    stop = threading.Event()

    def serve() -> None:
        conn, _ = server.accept()
        with conn:
            while not stop.is_set():
                data = conn.recv(65536)
                if not data:
                    return
                if b"HELLO" in data:  # redis-py 8 asks for RESP3: a map with proto 3
                    conn.sendall(b"%1\r\n$5\r\nproto\r\n:3\r\n")
                    continue
                if b"GET" not in data:
                    conn.sendall(b"+OK\r\n")
                    continue
                for byte in reply:
                    if stop.wait(every_s):
                        return
                    conn.sendall(bytes([byte]))
                    sent[0] += 1

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    try:
        yield server.getsockname()[1], sent
    finally:
        stop.set()
        server.close()


@pytest.mark.timeout(HANG_S)
def test_a_redis_that_trickles_its_reply_is_given_up_at_the_call_deadline(monkeypatch):
    """Each byte comes within the 2 s socket timeout, so only a deadline on the whole call
    stops the wait: the lookup is a miss and the remote cache goes off."""
    from torch._inductor import remote_cache

    from trcomp_container.inprocess.patches import redis_backend

    reply = b"$8\r\ncompiled\r\n"  # 14 bytes, one every 1.5 s: 21 s for the whole reply
    warned: list[str] = []
    guard = redis_backend.RedisGuard(warned.append, deadline_s=1.0)
    with trickling_redis(reply, every_s=1.5) as (port, sent):
        url = f"redis://127.0.0.1:{port}/0?socket_timeout=2&socket_connect_timeout=2"
        monkeypatch.setenv("TORCHINDUCTOR_REDIS_URL", url)
        undo = redis_backend.install(remote_cache, guard)
        assert undo is not None
        try:
            backend = remote_cache.RedisRemoteCacheBackend("trcomp-test")
            assert backend._get("pt2:trcomp-test") is None
            returned_with = sent[0]
            assert backend._get("pt2:other") is None  # off now: no second wait
        finally:
            undo()
    assert guard.down and returned_with < len(reply), returned_with
    assert "a call took more than 1 s" in warned[0]


@pytest.fixture(scope="module")
def tls_redis(tmp_path_factory) -> Iterator:
    with redis_server(tmp_path_factory.mktemp("redis"), password=PASSWORD, tls=True) as server:
        yield server


def test_a_remote_job_reads_a_tls_redis_with_the_password_from_its_environment(tls_redis, tmp_path):
    environ = {"TRCOMP_REDIS_PASSWORD": PASSWORD, "TRCOMP_REDIS_CA_CERTS": tls_redis.ca_certs}
    cache = _open(tls_redis.url, tmp_path / "live", remote_job=True, environ=environ, timeout_s=30)
    assert cache.facts["remote_cache"] is True, cache.warnings
    url = cache.environment[REDIS_URL_ENV]
    assert url.startswith("rediss://") and "socket_timeout=" in url
    assert PASSWORD not in str(cache.facts) and PASSWORD not in cache.location.shown

    assert PASSWORD not in url and cache.environment[REDIS_PASSWORD_ENV] == PASSWORD
    _round_trip_through_inductors_backend(cache.environment)
    assert _open(tls_redis.url, tmp_path / "b", environ=environ, timeout_s=30).warm is True

    # The same server under another name: its certificate names 127.0.0.1 only, so the
    # job refuses it before sending the password (redis-py 5 sent it: no host name check).
    assert "ssl_check_hostname=True" in url
    other_name = tls_redis.url.replace("127.0.0.1", "localhost")
    cache = _open(other_name, tmp_path / "c", remote_job=True, environ=environ, timeout_s=30)
    assert cache.facts["remote_cache"] is False and "localhost" in cache.warnings[0]


def test_the_redis_password_is_in_no_variable_torch_writes_into_its_repro_scripts(
    tls_redis, tmp_path, monkeypatch
):
    """torch writes every variable whose name holds TORCH, INDUCTOR, DYNAMO or TRITON into
    its repro scripts (fx_graph_runnable.py with debug=True): the job's variables, as its
    training processes get them, leave the password out of all of those."""
    from torch._dynamo.debug_utils import generate_env_vars_string

    environ = {"TRCOMP_REDIS_PASSWORD": PASSWORD, "TRCOMP_REDIS_CA_CERTS": tls_redis.ca_certs}
    cache = _open(tls_redis.url, tmp_path / "live", remote_job=True, environ=environ, timeout_s=30)
    assert cache.facts["remote_cache"] is True, cache.warnings
    for name, value in cache.environment.items():
        monkeypatch.setenv(name, value)
    dumped = generate_env_vars_string()
    assert PASSWORD not in dumped and not set(TORCH_REMOTE_CACHE_ENV) & set(cache.environment)
    _round_trip_through_inductors_backend(cache.environment)  # the guard gives the password


def test_a_local_jobs_plain_redis_turns_inductors_remote_caches_on(tmp_path):
    # What the redis:// job in test_shared_cache_jobs.py checked before it kept only the
    # rediss:// job: the same open_redis and inductor backend, without TLS or password.
    with redis_server(tmp_path) as server:
        cache = _open(server.url, tmp_path / "live", timeout_s=30)
        assert cache.facts["remote_cache"] is True, cache.warnings
        assert cache.facts["kind"] == "redis" and cache.warm is False  # nothing stored yet
        url = cache.environment[REDIS_URL_ENV]
        assert url.startswith("redis://") and "socket_timeout=" in url
        _round_trip_through_inductors_backend(cache.environment)
        assert _open(server.url, tmp_path / "b", timeout_s=30).warm is True


def test_the_start_up_check_is_one_scan_whatever_else_redis_holds(tmp_path):
    """A Redis shared with other data: 50,000 unrelated keys cost the check one SCAN, not a
    walk of the keyspace (3 million keys outlasted the budget and switched the cache off)."""
    import redis

    with redis_server(tmp_path) as server:
        client = redis.Redis.from_url(server.url)
        for start in range(0, 50_000, 5_000):
            client.mset({f"other-app:{n}": "x" for n in range(start, start + 5_000)})
        client.config_resetstat()
        cache = _open(server.url, tmp_path / "live", timeout_s=30)
        stats = client.info("commandstats")
        client.close()
    assert cache.facts["remote_cache"] is True, cache.warnings
    assert stats["cmdstat_scan"]["calls"] == 1, stats.get("cmdstat_scan")


def test_a_wrong_redis_password_leaves_the_remote_caches_off(tls_redis, tmp_path):
    environ = {"TRCOMP_REDIS_PASSWORD": "wrong", "TRCOMP_REDIS_CA_CERTS": tls_redis.ca_certs}
    cache = _open(tls_redis.url, tmp_path / "live", environ=environ, timeout_s=30)
    assert cache.environment == {} and cache.facts["remote_cache"] is False
    assert "wrong" not in cache.warnings[0].split("(")[0]


@pytest.mark.parametrize(
    ("uri", "environ", "says"),
    [
        ("redis://cache.internal:6379", {"TRCOMP_REDIS_PASSWORD": PASSWORD}, "has no TLS"),
        ("rediss://cache.internal:6379", {}, "has no password"),
        ("redis://cache.internal:6379", {}, "has no TLS (rediss://) and no password"),
    ],
)
def test_a_remote_jobs_redis_without_tls_or_password_is_refused(tmp_path, uri, environ, says):
    environ = {**environ, KEY_ENV: "team-key-0123456789abcdef"}  # keyed: TLS is the question
    with pytest.raises(SharedCacheError, match="shared_cache_insecure=True") as caught:
        _open(uri, tmp_path / "live", remote_job=True, environ=environ)
    assert says in str(caught.value) and PASSWORD not in str(caught.value)
    # The documented opt-in: the job goes on (here, to a Redis it cannot reach: cold).
    cache = _open(uri, tmp_path / "live", remote_job=True, environ=environ, insecure=True)
    assert cache.facts["remote_cache"] is False


def test_the_password_can_come_from_secrets_manager(tls_redis, tmp_path):
    import boto3

    with moto_server(tmp_path) as moto, aws_environment(moto.url):
        arn = boto3.client("secretsmanager").create_secret(Name="redis", SecretString=PASSWORD)
        environ = {
            "TRCOMP_REDIS_PASSWORD_SECRET": arn["ARN"],
            "TRCOMP_REDIS_CA_CERTS": tls_redis.ca_certs,
            **{k: os.environ[k] for k in ("AWS_ENDPOINT_URL", "AWS_REGION")},
        }
        cache = _open(
            tls_redis.url, tmp_path / "live", remote_job=True, environ=environ, timeout_s=30
        )
        assert cache.facts["remote_cache"] is True, cache.warnings
        create_bucket("unused")  # the emulator answered the job's calls


@pytest.mark.slow
def test_a_redis_that_stops_answering_mid_job_does_not_fail_the_compile(tmp_path):
    """After the start-up check passed: the hook turns inductor's remote cache off."""
    from tests.helpers.hook import run_hooked

    code = (
        "import torch\n"
        "f = torch.compile(lambda x: (x.sin() * 2).sum())\n"
        "print('result', f(torch.ones(4)).item())\n"
        "print('result', f(torch.ones(4, 4)).item())\n"
    )
    with hung_server() as (port, accepted):
        env = {
            **RedisHandoff(
                f"redis://127.0.0.1:{port}/0?socket_timeout=2&socket_connect_timeout=2",
                ("fx_graph", "autograd"),
            ).to_env(),
            "TORCHINDUCTOR_CACHE_DIR": str(tmp_path / "inductor"),
        }
        child = run_hooked(tmp_path, code, extra_env=env, fork=True)
    assert child.returncode == 0, child.stderr[-3000:]
    assert child.stdout.count("result") == 2
    assert child.stderr.count("stopped answering") == 1  # then off: no second wait
    assert len(accepted) == 1


_REMOTE_CACHE_CONFIG = """
import json
import torch._dynamo.config as dynamo
import torch._functorch.config as functorch
import torch._inductor.config as inductor
print(json.dumps([inductor.fx_graph_remote_cache, functorch.enable_remote_autograd_cache,
                  dynamo.automatic_dynamic_remote_pgo, inductor.autotune_remote_cache,
                  inductor.bundled_autotune_remote_cache]))
"""


@pytest.mark.parametrize("gpu", [False, True])
def test_the_hook_turns_on_the_remote_caches_of_the_handoff_and_nothing_else_does(gpu, tmp_path):
    # The flags are torch's (torch 2.9 and 2.14 alike): a renamed one would leave a shared
    # Redis cache silently unused. Only the start-up hook turns them on; a process without
    # it (python -I, or no metrics variable) gets the job's variables and none of them on.
    from tests.helpers.hook import run_hooked
    from trcomp.contract.shared_cache import parse_location
    from trcomp_container.caching.redis_cache import redis_environment

    env = redis_environment(parse_location("redis://cache-host:6379/0"), gpu=gpu)
    assert not set(TORCH_REMOTE_CACHE_ENV) & set(env)
    hooked = run_hooked(tmp_path, _REMOTE_CACHE_CONFIG, extra_env=env, fork=True)
    assert hooked.returncode == 0, hooked.stderr[-2000:]
    fx, autograd, pgo, autotune, bundled = json.loads(hooked.stdout.strip().splitlines()[-1])
    assert fx is True and autograd is True and pgo is True
    assert autotune is bundled is (True if gpu else None)

    child = {k: v for k, v in os.environ.items() if not k.startswith(("TORCHINDUCTOR_", "TORCH_"))}
    done = subprocess.run(
        [sys.executable, "-I", "-c", _REMOTE_CACHE_CONFIG],
        env={**child, **env},
        capture_output=True,
        text=True,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    assert json.loads(done.stdout.strip().splitlines()[-1]) == [None] * 5  # was all on
