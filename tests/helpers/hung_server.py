"""A store that hangs: a TCP socket on 127.0.0.1 that accepts and never answers.

Stands in for a Redis or an S3 endpoint that stopped responding (a half-dead
load balancer, a paused server): connections succeed, every read waits.
"""

from __future__ import annotations

import contextlib
import socket
import threading
from collections.abc import Callable, Iterator, Sequence
from typing import TypeVar

__all__ = ["hung_server", "until_reached"]

T = TypeVar("T")


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


def until_reached(
    attempt: Callable[[int, float], T], budgets: Sequence[float] = (8.0, 20.0, 45.0)
) -> tuple[T, float]:
    """``attempt(port, budget)`` against a fresh hung server, again with the next budget
    while the server took no connection; returns the first result that reached it, and
    its budget.

    A job spends part of its budget before its first request (boto3 builds its clients);
    on a loaded CI machine that once outlasted 8 s, and a budget spent before the hung
    store was asked proves nothing about the hang. A fresh server per attempt keeps a
    late connection from an abandoned earlier attempt out of the count.
    """
    for budget in budgets:
        with hung_server() as (port, accepted):
            result = attempt(port, budget)
        if accepted:
            return result, budget
    raise AssertionError(f"the hung server was never reached, with budgets of {list(budgets)} s")
