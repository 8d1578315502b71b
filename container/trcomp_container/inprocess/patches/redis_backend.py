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

The same wrappers point inductor's backend at the job's Redis before its first call,
with a client of the guard's own: the URL and password of the hook's
:class:`~trcomp_container.inprocess.redis_handoff.RedisHandoff`, which the hook took
out of the environment as it started. torch's own variable (``TORCHINDUCTOR_REDIS_URL``)
is never set: any process would read it, hook or not, and torch writes the variables
it reads into its repro scripts.

And they sign what inductor stores and check what it reads, when the job has the
team's key (the handoff's keys: the current one, and the previous one while the team
rotates keys; :mod:`trcomp_container.caching.signing`, purpose
:data:`~trcomp_container.caching.signing.REDIS_VALUE`): a value is stored as
:data:`HEADER`, the time it was written (8 bytes, seconds), an HMAC-SHA256 of its
Redis key name, that time and its bytes with the current key, then the bytes inductor
gave. A value read back that no key signed under that name (unsigned, changed, copied
from another key name, signed by an older trcomp) is a miss, never handed to inductor
(it unpickles FX-graph entries: code), and is counted (:attr:`RedisGuard.refused`); so
is one signed before the team's ``not_before`` (withdrawn, :attr:`RedisGuard.withdrawn`
too). The record carries the counts and one warning each. Without a key values are
stored as they are, and read as they are but for a signature, which is taken off
unchecked (a keyed job's value is still a hit): Redis is then exactly as trusted as its
password.
"""

from __future__ import annotations

import functools
import sys
import threading
from collections.abc import Callable, Sequence
from types import ModuleType
from typing import Any

from trcomp.contract.withdrawal import format_moment
from trcomp_container.caching import signing
from trcomp_container.caching.signing import Keys
from trcomp_container.inprocess import torch_compat
from trcomp_container.inprocess.redis_handoff import RedisHandoff

__all__ = [
    "CALL_DEADLINE_S",
    "HEADER",
    "RedisGuard",
    "checked",
    "install",
    "sign",
    "verified",
]


CALL_DEADLINE_S = 5.0
"""The most one Redis call may take, wall clock. The socket timeout (2 s) bounds each read,
not the call: a server that trickles its reply a byte at a time held one lookup 25 s."""


HEADER = b"trcomp-redis-value/2\n"
"""What a signed value starts with (the version of the scheme), before its time and MAC."""
_OLD_HEADERS = (b"trcomp-redis-value/1\n",)
"""Headers of older schemes: taken off by a job without a key, never verified."""
_TIME_BYTES = 8
_START = len(HEADER) + _TIME_BYTES + signing.MAC_BYTES


def _fields(name: str, value: bytes) -> tuple[bytes, bytes]:
    return name.encode("utf-8", "surrogatepass"), value


def sign(key: bytes, name: str, value: bytes, when: int | None = None) -> bytes:
    """``value`` as stored under the Redis key ``name``, written at ``when`` (now): header,
    time, MAC with ``key``, value."""
    seconds = signing.written_at(when)
    mac = signing.sign(key, signing.REDIS_VALUE, seconds, *_fields(name, value))
    return HEADER + seconds.to_bytes(_TIME_BYTES, "big") + mac + value


def checked(keys: Keys, name: str, stored: bytes) -> tuple[signing.Verdict, bytes | None]:
    """Whether :func:`sign` stored ``stored`` under ``name`` with one of ``keys``, not
    withdrawn; the value when it is ``ok``."""
    if not stored.startswith(HEADER) or len(stored) < _START:
        return "bad", None
    when = int.from_bytes(stored[len(HEADER) : len(HEADER) + _TIME_BYTES], "big")
    mac, value = stored[len(HEADER) + _TIME_BYTES : _START], stored[_START:]
    verdict = signing.check(keys, signing.REDIS_VALUE, when, mac, *_fields(name, value))
    return verdict, value if verdict == "ok" else None


def verified(keys: Sequence[bytes], name: str, stored: bytes) -> bytes | None:
    """The value :func:`sign` stored under ``name`` with one of ``keys``; None otherwise."""
    return checked(Keys(tuple(keys)), name, stored)[1]


def _unchecked(stored: bytes) -> bytes:
    """A value as a job without a key reads it: the signature, if any, taken off."""
    if stored.startswith(HEADER) and len(stored) >= _START:
        return stored[_START:]
    for header in _OLD_HEADERS:
        if stored.startswith(header) and len(stored) >= len(header) + signing.MAC_BYTES:
            return stored[len(header) + signing.MAC_BYTES :]
    return stored


class RedisGuard:
    """Whether a Redis error, or a call past its deadline, turned inductor's remote cache off
    in this process; the job's keys, and how many values read failed them."""

    def __init__(
        self,
        warn: Callable[[str], None],
        deadline_s: float = CALL_DEADLINE_S,
        handoff: RedisHandoff | None = None,
    ) -> None:
        """``handoff``: the job's Redis (URL, password) and keys, values are signed with the
        first and checked with all (None: the backend keeps torch's own client, no keys)."""
        self.down = False
        self.deadline_s = deadline_s
        self.keys = Keys(handoff.keys, handoff.not_before) if handoff is not None else Keys()
        self.refused = 0
        """Values read that no key signed under their name, or withdrawn: each was a miss."""
        self.withdrawn = 0
        """Of :attr:`refused`, values signed before the team's ``not_before``."""
        self._warn = warn
        self._handoff = handoff
        self._client: Any = None

    def wrap_get(self, method: Callable[..., Any]) -> Callable[..., Any]:
        """``_get(key)`` within the deadline; with keys, only a value signed under ``key``."""
        guard = self

        @functools.wraps(method)
        def get(backend: Any, key: str, *args: Any, **kwargs: Any) -> Any:
            stored = guard._call(method, backend, key, *args, **kwargs)
            if stored is None:
                return None
            if not guard.keys:  # trusted as it is; a keyed job's header would not decode
                return _unchecked(bytes(stored))
            verdict, value = checked(guard.keys, key, bytes(stored))
            if value is None:
                guard.refused += 1  # a miss: inductor compiles it again
                guard.withdrawn += verdict == "withdrawn"
            return value

        return get

    def wrap_put(self, method: Callable[..., Any]) -> Callable[..., Any]:
        """``_put(key, data)`` within the deadline; with keys, ``data`` signed under ``key``."""
        guard = self

        @functools.wraps(method)
        def put(backend: Any, key: str, data: Any, *args: Any, **kwargs: Any) -> Any:
            current = guard.keys.current
            if current is not None and isinstance(data, bytes | bytearray):
                data = sign(current, key, bytes(data))
            return guard._call(method, backend, key, data, *args, **kwargs)

        return put

    def refused_warning(self) -> str | None:
        """One warning naming how many values were refused for their signature (withdrawn
        ones apart: :meth:`withdrawn_warning`); None when none was."""
        forged = self.refused - self.withdrawn
        if not forged:
            return None
        return (
            f"{forged} value(s) read from the Redis of shared_cache carried no valid "
            "signature of the team's key (unsigned, changed, copied from another key name, or "
            "signed by an older trcomp) and were treated as misses: inductor compiled those "
            "graphs again instead of loading them. A job without the key, or someone with the "
            "Redis password, wrote them (docs/remote.md, Redis)."
        )

    def withdrawn_warning(self) -> str | None:
        """One warning naming how many values were withdrawn; None when none was."""
        if not self.withdrawn:
            return None
        return (
            f"{self.withdrawn} value(s) read from the Redis of shared_cache were signed before "
            f"the team's not_before ({format_moment(self.keys.not_before or 0)}): withdrawn, "
            "treated as misses and compiled again (docs/remote.md, Withdrawing entries)."
        )

    def _call(self, method: Callable[..., Any], backend: Any, *args: Any, **kwargs: Any) -> Any:
        if self.down:
            return None  # a miss: compile, and do not wait on that Redis again
        self._connect(backend)
        outcome: dict[str, Any] = {}

        def work() -> None:
            try:
                outcome["value"] = method(backend, *args, **kwargs)
            except BaseException as exc:  # handed to the caller's thread just below
                outcome["error"] = exc

        # A daemon thread: one stuck in a read is left behind, never waited for.
        thread = threading.Thread(target=work, name="trcomp-redis-call", daemon=True)
        thread.start()
        thread.join(self.deadline_s)
        if thread.is_alive():
            self._off(backend, f"a call took more than {self.deadline_s:g} s")
            return None
        exc = outcome.get("error")
        if exc is None:
            return outcome.get("value")
        if not _is_redis_error(exc):
            raise exc
        self._off(backend, f"{type(exc).__name__}: {exc}")
        return None

    def _connect(self, backend: Any) -> None:
        """Point the backend at the job's Redis, with the password: torch made its client from
        its own variables, which no job sets (so: localhost). redis-py connects lazily, so
        the client torch made never connected."""
        if self._handoff is None or backend._redis is None:
            return
        if self._client is None:
            import redis

            self._client = redis.Redis.from_url(self._handoff.url, password=self._handoff.password)
        if backend._redis is not self._client:
            backend._redis = self._client

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
    wrappers = {"_get": guard.wrap_get, "_put": guard.wrap_put}
    for name in torch_compat.REDIS_BACKEND_METHODS:
        setattr(backend, name, wrappers[name](getattr(backend, name)))

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
