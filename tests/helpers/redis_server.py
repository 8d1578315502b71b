"""A real ``redis-server`` (Debian package) on 127.0.0.1, started and stopped by the test.

Optionally with a password (``requirepass``) and TLS only (``--port 0
--tls-port``, a self-signed certificate made with ``openssl``; Debian's
redis-server 7.0 is built with TLS).
"""

from __future__ import annotations

import contextlib
import shutil
import socket
import ssl
import subprocess
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

__all__ = ["RedisServer", "redis_server"]


@dataclass(frozen=True)
class RedisServer:
    """A running server: its URL (no password in it), password and CA bundle."""

    url: str
    port: int
    password: str | None = None
    ca_certs: str | None = None


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _ping(port: int, ca_certs: str | None) -> bool:
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=1) as raw:
            sock = raw
            if ca_certs:
                sock = ssl.create_default_context(cafile=ca_certs).wrap_socket(
                    raw, server_hostname="127.0.0.1"
                )
            sock.sendall(b"PING\r\n")
            answer = sock.recv(64)
            # A server with a password answers PING with -NOAUTH: it is up.
            return answer.startswith((b"+PONG", b"-NOAUTH"))
    except OSError:
        return False


def _certificate(tmp: Path) -> tuple[Path, Path]:
    cert, key = tmp / "redis-cert.pem", tmp / "redis-key.pem"
    command = ["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "1"]
    command += ["-keyout", str(key), "-out", str(cert), "-subj", "/CN=127.0.0.1"]
    command += ["-addext", "subjectAltName=IP:127.0.0.1"]
    subprocess.run(
        command,
        check=True,
        capture_output=True,
    )
    return cert, key


@contextlib.contextmanager
def redis_server(
    tmp: Path, *, password: str | None = None, tls: bool = False
) -> Iterator[RedisServer]:
    """Run ``redis-server`` on a free port, nothing persisted; yield how to reach it."""
    binary = shutil.which("redis-server")
    if binary is None:
        raise RuntimeError("redis-server is not installed: apt-get install redis-server")
    port = _free_port()
    args = [binary, "--bind", "127.0.0.1", "--save", "", "--appendonly", "no", "--dir", str(tmp)]
    ca_certs = None
    if tls:
        cert, key = _certificate(tmp)
        ca_certs = str(cert)
        args += ["--port", "0", "--tls-port", str(port), "--tls-cert-file", str(cert)]
        args += ["--tls-key-file", str(key), "--tls-ca-cert-file", str(cert)]
        args += ["--tls-auth-clients", "no"]
    else:
        args += ["--port", str(port)]
    if password:
        args += ["--requirepass", password]
    log_path = tmp / f"redis-{port}.log"
    log = log_path.open("wb")
    process = subprocess.Popen(args, stdout=log, stderr=subprocess.STDOUT)
    try:
        deadline = time.monotonic() + 30
        while not _ping(port, ca_certs):
            if process.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"redis-server did not start: {log_path.read_text()}")
            time.sleep(0.05)
        scheme = "rediss" if tls else "redis"
        yield RedisServer(f"{scheme}://127.0.0.1:{port}", port, password, ca_certs)
    finally:
        process.terminate()
        process.wait(timeout=10)
        log.close()
