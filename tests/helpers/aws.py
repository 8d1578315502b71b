"""A real AWS emulator for the remote-path tests: moto in server mode, in its own process.

Test modules build their fixtures from :func:`moto_server` and :func:`aws_environment`.
The emulator records every request it receives (moto's recorder), so tests assert on
what reached the server, not on what the code meant to send. Only the standard library
is imported here (boto3 when called): the v2 and the v3 environments both import it.
"""

from __future__ import annotations

import base64
import contextlib
import json
import os
import socket
import subprocess
import sys
import threading
import time
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

__all__ = [
    "ACCOUNT",
    "FAKE_CREDENTIALS",
    "OTHER_ACCOUNT",
    "REGION",
    "AwsErrorServer",
    "MotoServer",
    "aws_environment",
    "aws_error_server",
    "complete_lines",
    "create_bucket",
    "create_sagemaker_role",
    "moto_server",
    "s3control_resolves",
]

REGION = "us-west-2"
ACCOUNT = "123456789012"  # moto's default account
OTHER_ACCOUNT = "444455556666"  # another account, for buckets the job's account does not own
# Recognisable values: tests search requests, stored jobs and logs for them.
FAKE_CREDENTIALS = {
    "AWS_ACCESS_KEY_ID": "AKIATRCOMPLEAKCHECK01",
    "AWS_SECRET_ACCESS_KEY": "trcompSecretAccessKeyLeakCheck0123456789",
    "AWS_SESSION_TOKEN": "trcompSessionTokenLeakCheckABCDEFGHIJKLMNOP",
}
# Anything that could point boto3 or the SageMaker SDK elsewhere.
_CLEARED = (
    "AWS_PROFILE",
    "AWS_DEFAULT_PROFILE",
    "AWS_CONFIG_FILE",
    "AWS_SHARED_CREDENTIALS_FILE",
    "AWS_ROLE_ARN",
    "AWS_WEB_IDENTITY_TOKEN_FILE",
    "AWS_CONTAINER_CREDENTIALS_RELATIVE_URI",
    "AWS_CONTAINER_CREDENTIALS_FULL_URI",
    "TRCOMP_IMAGE_URI",
)


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def complete_lines(recording: str) -> list[str]:
    """The recording's entries that moto has finished writing.

    moto records a request before it answers it, writing the entry and then its
    newline, and an entry longer than the file's buffer reaches the file in pieces. A
    request still in flight while the recording is read (another SDK thread's) can so
    leave a last line without its newline, cut anywhere; every request that has been
    answered is complete above it.
    """
    complete, _, _in_flight = recording.rpartition("\n")
    return complete.splitlines()


@dataclass
class MotoServer:
    """A running ``moto.server`` process and helpers to read what it received."""

    url: str
    recording: Path
    process: subprocess.Popen[bytes] = field(repr=False)

    def api(self, path: str, data: bytes | None = None) -> bytes:
        """Call moto's own HTTP API (``/moto-api/...``)."""
        # text/plain: with urllib's default form type Flask hides the body from moto.
        request = urllib.request.Request(
            self.url + path,
            data=data,
            method="POST" if data else "GET",
            headers={"Content-Type": "text/plain"},
        )
        with urllib.request.urlopen(request, timeout=10) as response:
            return bytes(response.read())

    def requests(self, target: str | None = None) -> list[dict[str, Any]]:
        """Recorded requests, each with its decoded ``body`` (optionally one X-Amz-Target)."""
        found = []
        for line in complete_lines(self.api("/moto-api/recorder/download-recording").decode()):
            entry = json.loads(line)
            if target and entry["headers"].get("X-Amz-Target") != target:
                continue
            body = entry.get("body") or ""
            entry["body"] = base64.b64decode(body) if entry.get("body_encoded") else body.encode()
            found.append(entry)
        return found

    def json_requests(self, operation: str) -> list[dict[str, Any]]:
        """Bodies of the SageMaker JSON requests for one operation, e.g. CreateTrainingJob."""
        return [json.loads(e["body"]) for e in self.requests(f"SageMaker.{operation}")]

    def set_iam_checks(self, on: bool) -> None:
        """Turn moto's IAM authorization on (every request checked) or off."""
        self.api("/moto-api/reset-auth", b"0" if on else b"inf")


@contextlib.contextmanager
def moto_server(tmp: Path) -> Iterator[MotoServer]:
    """Start ``python -m moto.server`` on 127.0.0.1 with a free port, recording requests."""
    port = _free_port()
    recording = tmp / "moto-recording.jsonl"
    env = {
        **os.environ,
        "MOTO_ENABLE_RECORDING": "true",
        "MOTO_RECORDER_FILEPATH": str(recording),
    }
    log = (tmp / "moto.log").open("wb")
    process = subprocess.Popen(
        [sys.executable, "-m", "moto.server", "-H", "127.0.0.1", "-p", str(port)],
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=log,
    )
    server = MotoServer(f"http://127.0.0.1:{port}", recording, process)
    try:
        deadline = time.monotonic() + 60
        while True:
            try:
                server.api("/moto-api/data.json")
                break
            except OSError:
                if process.poll() is not None or time.monotonic() > deadline:
                    raise RuntimeError(
                        f"moto server did not start: {(tmp / 'moto.log').read_text()[-2000:]}"
                    ) from None
                time.sleep(0.1)
        yield server
    finally:
        process.terminate()
        process.wait(timeout=10)
        log.close()


@contextlib.contextmanager
def aws_environment(endpoint: str) -> Iterator[dict[str, str]]:
    """Point boto3 (every service) at ``endpoint`` with fake credentials; restore after.

    No SageMaker SDK config file: with one, the SDK validates it against its JSON
    schema on every lookup (about a second each here), which would dominate the
    tests. Its telemetry call then fails fast, offline, and is only logged.
    """
    values = {
        **FAKE_CREDENTIALS,
        "AWS_ENDPOINT_URL": endpoint,
        "AWS_REGION": REGION,
        "AWS_DEFAULT_REGION": REGION,
        "AWS_EC2_METADATA_DISABLED": "true",
        "SAGEMAKER_SUPPRESS_V2_WARNING": "1",
    }
    import boto3

    saved = {k: os.environ.get(k) for k in (*values, *_CLEARED)}
    for key in _CLEARED:
        os.environ.pop(key, None)
    os.environ.update(values)
    # The SageMaker SDK reuses boto3's default session, which caches credentials.
    boto3.DEFAULT_SESSION = None
    try:
        yield values
    finally:
        boto3.DEFAULT_SESSION = None
        for key, value in saved.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value


@contextlib.contextmanager
def s3control_resolves() -> Iterator[None]:
    """Let S3 Control calls reach a local emulator, as a hosts-file entry would.

    boto3 sends S3 Control requests to ``<account id>.<endpoint host>``, so with
    ``AWS_ENDPOINT_URL=http://127.0.0.1:PORT`` they go to ``123456789012.127.0.0.1``,
    which no resolver knows (moto's own tests ask for a hosts-file entry). In this
    process such names resolve to the address they end with; nothing else changes.
    """
    real = socket.getaddrinfo

    def getaddrinfo(host: Any, *args: Any, **kwargs: Any) -> Any:
        if isinstance(host, str) and host.endswith(".127.0.0.1"):
            host = "127.0.0.1"
        return real(host, *args, **kwargs)

    socket.getaddrinfo = getaddrinfo
    try:
        yield
    finally:
        socket.getaddrinfo = real


@dataclass
class AwsErrorServer:
    """An HTTP server that answers every AWS request with one error (JSON-protocol body)."""

    url: str
    status: int = 400
    code: str = "ValidationException"
    message: str = "error"
    received: list[str] = field(default_factory=list)


@contextlib.contextmanager
def aws_error_server() -> Iterator[AwsErrorServer]:
    """Serve AWS errors on 127.0.0.1 (moto cannot refuse a role or enforce quotas).

    Point one service at it with ``AWS_ENDPOINT_URL_<SERVICE>``; set ``code``,
    ``message`` and ``status`` on the returned object before each call.
    """
    state = AwsErrorServer(url="")

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            length = int(self.headers.get("Content-Length", 0))
            self.rfile.read(length)
            state.received.append(self.headers.get("X-Amz-Target") or self.path)
            body = json.dumps({"__type": state.code, "message": state.message}).encode()
            self.send_response(state.status)
            self.send_header("Content-Type", "application/x-amz-json-1.1")
            self.send_header("x-amzn-RequestId", "trcomp-test-request")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        # REST services (S3 Control) send GET: the same error (botocore reads the status).
        do_GET = do_POST

        def log_message(self, format: str, *args: Any) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    state.url = f"http://127.0.0.1:{server.server_address[1]}"
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield state
    finally:
        server.shutdown()
        server.server_close()


def create_sagemaker_role(name: str) -> str:
    """Create an IAM role SageMaker may assume (in the emulator boto3 points at); its ARN."""
    import boto3

    trust = {
        "Version": "2012-10-17",
        "Statement": [
            {
                "Effect": "Allow",
                "Principal": {"Service": "sagemaker.amazonaws.com"},
                "Action": "sts:AssumeRole",
            }
        ],
    }
    created = boto3.client("iam").create_role(
        RoleName=name, AssumeRolePolicyDocument=json.dumps(trust)
    )
    return str(created["Role"]["Arn"])


def create_bucket(name: str, *, account: str = ACCOUNT) -> None:
    """Create bucket ``name`` in :data:`REGION`, owned by ``account`` (moto reads its header)."""
    import boto3

    s3 = boto3.client("s3")
    if account != ACCOUNT:

        def as_account(request: Any, **_kwargs: Any) -> None:
            request.headers["x-moto-account-id"] = account

        s3.meta.events.register("before-send.s3.*", as_account)
    s3.create_bucket(Bucket=name, CreateBucketConfiguration={"LocationConstraint": REGION})
