"""What the entrypoint hands the start-up hook for a Redis shared cache, and how the hook
takes it.

A Redis shared cache is inductor's own remote caches, read and written by the training
processes while they compile. The entrypoint checks the server and hands the hook its
URL (no password in it), the caches to turn on, the password and the team's keys, in
the ``"redis"`` variables of the registry (:mod:`trcomp.contract.env`). The hook takes
them out of its process's environment as it starts (:meth:`RedisHandoff.take`), so
no process the script starts (inductor's compile workers, data-loader workers, a
``python -I`` child) inherits them, and turns the caches on in its own process only
(:meth:`~trcomp_container.inprocess.session.Session`): torch's own variables, which
any process would read without the hook and so without signatures, are never set.

Under torchrun the hook of the agent (torchrun itself: no ``LOCAL_RANK``) leaves them
for the workers it starts; each worker's hook takes them. Standard library only.
"""

from __future__ import annotations

from collections.abc import Mapping, MutableMapping
from dataclasses import dataclass, field

from trcomp.contract.env import (
    KEY_ENV,
    LAUNCHER_ENV,
    NOT_BEFORE_ENV,
    PREVIOUS_KEY_ENV,
    REDIS_CACHES_ENV,
    REDIS_PASSWORD_ENV,
    REDIS_URL_ENV,
    REGISTRY,
)
from trcomp.contract.withdrawal import format_moment, parse_moment

__all__ = ["CACHES", "TORCHRUN", "RedisHandoff"]

CACHES = ("fx_graph", "autograd", "dynamo_pgo", "autotune", "bundled_autotune")
"""Inductor's remote caches by the names the handoff gives them (torch_compat maps each to
torch's config flag)."""

TORCHRUN = "torchrun"
""":data:`~trcomp.contract.env.LAUNCHER_ENV`'s value when the script runs under torchrun."""

_NAMES = tuple(v.name for v in REGISTRY if v.handoff == "redis")


@dataclass(frozen=True)
class RedisHandoff:
    """The Redis shared cache as the hook uses it: ``url`` (no password), the ``caches`` to
    turn on, the ``password``, the team's ``keys`` (the current first: it signs) and its
    ``not_before`` (seconds since the epoch: values signed earlier are withdrawn)."""

    url: str
    caches: tuple[str, ...] = ("fx_graph", "autograd", "dynamo_pgo")
    password: str | None = field(default=None, repr=False)
    keys: tuple[bytes, ...] = field(default=(), repr=False)
    not_before: int | None = None

    def to_env(self) -> dict[str, str]:
        """The variables the entrypoint sets in the training processes' environment."""
        env = {REDIS_URL_ENV: self.url, REDIS_CACHES_ENV: ",".join(self.caches)}
        if self.password:
            env[REDIS_PASSWORD_ENV] = self.password
        for name, key in zip((KEY_ENV, PREVIOUS_KEY_ENV), self.keys, strict=False):
            env[name] = key.decode()
        if self.keys and self.not_before is not None:
            env[NOT_BEFORE_ENV] = format_moment(self.not_before)
        return env

    @classmethod
    def from_env(cls, environ: Mapping[str, str]) -> RedisHandoff | None:
        """Read the handoff (None without a URL: no Redis shared cache, or not this process)."""
        url = environ.get(REDIS_URL_ENV) or ""
        if not url:
            return None
        caches = tuple(
            c for c in (environ.get(REDIS_CACHES_ENV) or "").split(",") if c.strip() in CACHES
        )
        current = (environ.get(KEY_ENV) or "").strip().encode()
        previous = (environ.get(PREVIOUS_KEY_ENV) or "").strip().encode()
        keys: tuple[bytes, ...] = ()
        if current:
            keys = (current, previous) if previous and previous != current else (current,)
        moment = (environ.get(NOT_BEFORE_ENV) or "").strip()
        not_before = parse_moment(moment, what=NOT_BEFORE_ENV) if keys and moment else None
        return cls(url, caches, environ.get(REDIS_PASSWORD_ENV) or None, keys, not_before)

    @classmethod
    def take(cls, environ: MutableMapping[str, str]) -> RedisHandoff | None:
        """Read the handoff and remove it from ``environ`` (the process's own: children the
        script starts inherit none of it). torchrun's agent leaves it for its workers and
        gets none itself: it compiles nothing."""
        if environ.get(LAUNCHER_ENV) == TORCHRUN and "LOCAL_RANK" not in environ:
            return None
        found = cls.from_env(environ)
        for name in _NAMES:
            environ.pop(name, None)
        return found
