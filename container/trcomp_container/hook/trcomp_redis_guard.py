"""Inductor's Redis remote cache gives up on a Redis that stops answering (torch 2.9).

torch's ``RedisRemoteCacheBackend`` marks itself unavailable only on redis-py's
``ConnectionError``. A Redis that passed the entrypoint's start-up check and
then stops answering raises ``TimeoutError`` (another ``RedisError``) out of
every lookup, after the socket timeout, and inductor fails the compile with
``BackendCompilerFailed``: measured here with a socket that never answers.
Patched once, when ``torch._inductor.remote_cache`` is imported: the first
``RedisError`` turns the remote cache off for the rest of the process, so the
job waits one socket timeout (2 s, set in ``TORCHINDUCTOR_REDIS_URL``) and
compiles on without it. Standard library only at import.
"""

from __future__ import annotations

import functools
import sys
from collections.abc import Callable
from types import ModuleType
from typing import Any

__all__ = ["guard_redis_backend", "is_down"]

_state = {"down": False}


def is_down() -> bool:
    """Whether a Redis error turned inductor's remote cache off in this process."""
    return _state["down"]


def guard_redis_backend(remote_cache: ModuleType, warn: Callable[[str], None]) -> bool:
    """Wrap the Redis backend's ``_get`` and ``_put``; False when torch no longer has them.

    ``warn`` reports, once, that the remote cache was turned off.
    """
    backend = getattr(remote_cache, "RedisRemoteCacheBackend", None)
    if backend is None or not all(callable(getattr(backend, n, None)) for n in ("_get", "_put")):
        return False
    for name in ("_get", "_put"):
        setattr(backend, name, _guarded(getattr(backend, name), warn))
    return True


def _guarded(method: Callable[..., Any], warn: Callable[[str], None]) -> Callable[..., Any]:
    @functools.wraps(method)
    def call(self: Any, *args: Any, **kwargs: Any) -> Any:
        if _state["down"]:
            return None  # a miss: compile, and do not wait on that Redis again
        try:
            return method(self, *args, **kwargs)
        except Exception as exc:
            if not _is_redis_error(exc):
                raise
            _state["down"] = True
            self._redis = None
            warn(
                f"the Redis of shared_cache stopped answering ({type(exc).__name__}: {exc}); "
                "this process compiles without inductor's remote caches"
            )
            return None

    return call


def _is_redis_error(exc: BaseException) -> bool:
    redis = sys.modules.get("redis.exceptions")
    return redis is not None and isinstance(exc, redis.RedisError)
