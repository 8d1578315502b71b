"""A store that hangs: a TCP socket on 127.0.0.1 that accepts and never answers.

Stands in for a Redis or an S3 endpoint that stopped responding (a half-dead
load balancer, a paused server): connections succeed, every read waits.
"""

from __future__ import annotations

import contextlib
import socket
import threading
from collections.abc import Iterator

__all__ = ["hung_server"]


@contextlib.contextmanager
def hung_server() -> Iterator[tuple[int, list[int]]]:
    """Yield ``(port, accepted)``: ``accepted`` grows by one per connection taken."""
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(64)
    accepted: list[int] = []
    held: list[socket.socket] = []
    stop = threading.Event()

    def serve() -> None:
        listener.settimeout(0.2)
        while not stop.is_set():
            try:
                conn, _ = listener.accept()
            except OSError:
                continue
            held.append(conn)  # kept open, never read from, never answered
            accepted.append(len(held))

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    try:
        yield int(listener.getsockname()[1]), accepted
    finally:
        stop.set()
        thread.join(timeout=5)
        for conn in held:
            conn.close()
        listener.close()
