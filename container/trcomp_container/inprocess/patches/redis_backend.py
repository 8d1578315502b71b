"""Inductor's Redis remote cache gives up on a Redis that stops answering (torch 2.9).

torch's ``RedisRemoteCacheBackend`` marks itself unavailable only on redis-py's
``ConnectionError``. A Redis that passed the entrypoint's start-up check and
then stops answering raises ``TimeoutError`` (another ``RedisError``) out of
every lookup, after the socket timeout, and inductor fails the compile with
``BackendCompilerFailed``: measured here with a socket that never answers.
Installed once, when ``torch._inductor.remote_cache`` is imported: the first
``RedisError``, or a call past :data:`CALL_DEADLINE_S` (a reply that trickles in
never trips the per-read socket timeout), turns the remote cache off for the rest
of the process, so the job waits one socket timeout (2 s, set in
``TORCHINDUCTOR_REDIS_URL``) or one deadline, and compiles on without it.

The same wrappers give inductor's client the Redis password, from
``TRCOMP_REDIS_PASSWORD`` (set by the entrypoint), before its first call:
``TORCHINDUCTOR_REDIS_URL`` carries none, since torch writes the variables it
reads into its repro scripts.
"""

from __future__ import annotations

import functools
import os
import sys
import threading
from collections.abc import Callable
from types import ModuleType
from typing import Any

from trcomp.contract.shared_cache import REDIS_PASSWORD_ENV
from trcomp_container.inprocess import torch_compat

__all__ = ["CALL_DEADLINE_S", "RedisGuard", "install"]


CALL_DEADLINE_S = 5.0
"""The most one Redis call may take, wall clock. The socket timeout (2 s) bounds each read,
not the call: a server that trickles its reply a byte at a time held one lookup 25 s."""


class RedisGuard:
    """Whether a Redis error, or a call past its deadline, turned inductor's remote cache off
    in this process."""

    def __init__(
        self,
        warn: Callable[[str], None],
        deadline_s: float = CALL_DEADLINE_S,
        password: str | None = None,
    ) -> None:
        """``password``: the Redis password (default: ``TRCOMP_REDIS_PASSWORD``, read now)."""
        self.down = False
        self.deadline_s = deadline_s
        self._warn = warn
        self._password = password or os.environ.get(REDIS_PASSWORD_ENV) or None

    def wrap(self, method: Callable[..., Any]) -> Callable[..., Any]:
        guard = self

        @functools.wraps(method)
        def call(backend: Any, *args: Any, **kwargs: Any) -> Any:
            if guard.down:
                return None  # a miss: compile, and do not wait on that Redis again
            guard._authenticate(backend)
            outcome: dict[str, Any] = {}

            def work() -> None:
                try:
                    outcome["value"] = method(backend, *args, **kwargs)
                except BaseException as exc:  # handed to the caller's thread just below
                    outcome["error"] = exc

            # A daemon thread: one stuck in a read is left behind, never waited for.
            thread = threading.Thread(target=work, name="trcomp-redis-call", daemon=True)
            thread.start()
            thread.join(guard.deadline_s)
            if thread.is_alive():
                guard._off(backend, f"a call took more than {guard.deadline_s:g} s")
                return None
            exc = outcome.get("error")
            if exc is None:
                return outcome.get("value")
            if not _is_redis_error(exc):
                raise exc
            guard._off(backend, f"{type(exc).__name__}: {exc}")
            return None

        return call

    def _authenticate(self, backend: Any) -> None:
        """Give the backend's client the password: redis-py connects at the first call, with
        its pool's ``connection_kwargs``."""
        client = backend._redis
        if self._password is None or client is None:
            return
        settings = client.connection_pool.connection_kwargs
        if settings.get("password") != self._password:
            settings["password"] = self._password

    def _off(self, backend: Any, why: str) -> None:
        self.down = True
        backend._redis = None
        self._warn(
            f"the Redis of shared_cache stopped answering ({why}); this process compiles "
            "without inductor's remote caches"
        )


def install(remote_cache: ModuleType, guard: RedisGuard) -> Callable[[], None] | None:
    """Wrap the Redis backend's ``_get`` and ``_put``; None when torch no longer has them."""
    backend = torch_compat.redis_backend_class(remote_cache)
    if backend is None:
        return None
    before = {name: backend.__dict__.get(name) for name in torch_compat.REDIS_BACKEND_METHODS}
    for name in torch_compat.REDIS_BACKEND_METHODS:
        setattr(backend, name, guard.wrap(getattr(backend, name)))

    def undo() -> None:
        for name, method in before.items():
            if method is None:
                delattr(backend, name)
            else:
                setattr(backend, name, method)

    return undo


def _is_redis_error(exc: BaseException) -> bool:
    redis = sys.modules.get("redis.exceptions")
    return redis is not None and isinstance(exc, redis.RedisError)
