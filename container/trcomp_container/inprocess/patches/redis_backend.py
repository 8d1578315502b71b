"""Inductor's Redis remote cache gives up on a Redis that stops answering (torch 2.9).

torch's ``RedisRemoteCacheBackend`` marks itself unavailable only on redis-py's
``ConnectionError``. A Redis that passed the entrypoint's start-up check and
then stops answering raises ``TimeoutError`` (another ``RedisError``) out of
every lookup, after the socket timeout, and inductor fails the compile with
``BackendCompilerFailed``: measured here with a socket that never answers.
Installed once, when ``torch._inductor.remote_cache`` is imported: the first
``RedisError`` turns the remote cache off for the rest of the process, so the
job waits one socket timeout (2 s, set in ``TORCHINDUCTOR_REDIS_URL``) and
compiles on without it.
"""

from __future__ import annotations

import functools
import sys
from collections.abc import Callable
from types import ModuleType
from typing import Any

from trcomp_container.inprocess import torch_compat

__all__ = ["RedisGuard", "install"]


class RedisGuard:
    """Whether a Redis error turned inductor's remote cache off in this process."""

    def __init__(self, warn: Callable[[str], None]) -> None:
        self.down = False
        self._warn = warn

    def wrap(self, method: Callable[..., Any]) -> Callable[..., Any]:
        guard = self

        @functools.wraps(method)
        def call(backend: Any, *args: Any, **kwargs: Any) -> Any:
            if guard.down:
                return None  # a miss: compile, and do not wait on that Redis again
            try:
                return method(backend, *args, **kwargs)
            except Exception as exc:  # narrowed just below: only redis-py's errors
                if not _is_redis_error(exc):
                    raise
                guard.down = True
                backend._redis = None
                guard._warn(
                    f"the Redis of shared_cache stopped answering ({type(exc).__name__}: "
                    f"{exc}); this process compiles without inductor's remote caches"
                )
                return None

        return call


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
