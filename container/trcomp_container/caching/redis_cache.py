"""A ``redis://`` or ``rediss://`` shared cache: inductor's own remote caches.

Inductor (torch 2.9) reads and writes Redis itself while the job compiles
(FX graph, AOTAutograd, autotune, bundled autotune, dynamo PGO). The entrypoint
builds the URL in the job, never in the hyperparameters, and never with the
password, and hands it to the start-up hook with the password and the team's keys
(from the environment or their secrets) as a
:class:`~trcomp_container.inprocess.redis_handoff.RedisHandoff`: the hook takes it
out of the environment as it starts, turns the remote caches on in its own process,
gives inductor's backend a client with the password, signs every value inductor
stores and refuses every value no key signed
(:mod:`trcomp_container.inprocess.patches.redis_backend`). torch's own variables
(``TORCHINDUCTOR_REDIS_URL``, ``TORCHINDUCTOR_FX_GRAPH_REMOTE_CACHE``...) are never
set: a process without the hook would read them, and Redis, unsigned. The URL has
socket timeouts (redis-py's default waits forever in
older versions, and torch marks the cache unavailable only on connection
errors), and the CA bundle of a ``rediss://`` server. Before it hands anything on it
checks, within the budget, that
the server answers; when it does not, the job gets none of them and compiles
cold instead of waiting on every lookup.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from urllib.parse import quote, urlencode

from trcomp.contract.env import REDIS_CA_ENV, REDIS_PASSWORD_ENV, REDIS_PASSWORD_SECRET_ENV
from trcomp.contract.errors import SharedCacheError
from trcomp.contract.shared_cache import SharedCacheLocation
from trcomp_container.caching.budget import Budget
from trcomp_container.caching.cache_secrets import read_secret, team_keys
from trcomp_container.caching.signing import Keys
from trcomp_container.inprocess.redis_handoff import RedisHandoff

__all__ = [
    "SCAN_COUNT",
    "RedisFound",
    "ca_certs",
    "check_redis_trust",
    "open_redis",
    "redis_environment",
    "redis_has_entries",
    "redis_password",
    "redis_url",
]

# Each Redis call of the user's process waits at most this long (a lookup per graph).
_CALL_TIMEOUT_S = 2.0


def redis_url(
    location: SharedCacheLocation,
    password: str | None,
    *,
    timeout_s: float = _CALL_TIMEOUT_S,
    ca_certs: str | None = None,
) -> str:
    """The URL redis-py (and so inductor) connects with: password, timeouts, CA bundle."""
    scheme = "rediss" if location.tls else "redis"
    auth = ""
    if password is not None or location.username:
        auth = f"{quote(location.username, safe='')}:{quote(password or '', safe='')}@"
    host = f"[{location.host}]" if ":" in location.host else location.host
    query: dict[str, object] = {"socket_timeout": timeout_s, "socket_connect_timeout": timeout_s}
    if location.tls:
        # redis-py 5 checks the certificate but not that it names the host: asked for here.
        query["ssl_check_hostname"] = True
        if ca_certs:
            query["ssl_ca_certs"] = ca_certs
    return f"{scheme}://{auth}{host}:{location.port}/{location.db}?{urlencode(query)}"


def redis_environment(
    location: SharedCacheLocation,
    *,
    gpu: bool,
    url: str | None = None,
    password: str | None = None,
    keys: Keys | None = None,
) -> dict[str, str]:
    """The start-up hook's handoff of inductor's remote caches on Redis (the image has
    ``redis``), as the training processes' variables (:class:`RedisHandoff`).

    ``url`` carries no password (:func:`redis_url` with ``None``); ``password`` and
    ``keys`` (the current key, then the previous one, and the team's ``not_before``)
    travel beside it, under names torch
    neither reads nor writes into its repro scripts, and the hook takes all of them out of
    the environment as it starts. The autotune caches only on GPU hosts: they tune triton
    kernels, and on CPU torch 2.9's bundled autotune cache fails every compile (no
    backend hash).
    """
    caches: tuple[str, ...] = ("fx_graph", "autograd", "dynamo_pgo")
    if gpu:
        caches += ("autotune", "bundled_autotune")
    held = keys or Keys()
    handoff = RedisHandoff(
        url or redis_url(location, None), caches, password or None, held.keys, held.not_before
    )
    return handoff.to_env()


def redis_password(environ: Mapping[str, str], *, timeout_s: float) -> str | None:
    """The Redis password of the job (its environment, or the secret it names); None."""
    return read_secret(environ, REDIS_PASSWORD_ENV, REDIS_PASSWORD_SECRET_ENV, timeout_s=timeout_s)


def check_redis_trust(
    location: SharedCacheLocation, *, password: str | None, remote_job: bool, insecure: bool
) -> None:
    """Refuse a SageMaker job's Redis without TLS or without a password, unless ``insecure``."""
    if not remote_job or insecure:
        return
    missing = [
        what
        for what, absent in (("TLS (rediss://)", not location.tls), ("password", not password))
        if absent
    ]
    if missing:
        raise SharedCacheError(
            f"shared_cache {location.shown} has no {' and no '.join(missing)}: anyone who "
            "reaches that Redis could put compiled code there that this job runs. Use "
            f"rediss://host:port with the password in a Secrets Manager secret named by "
            f"{REDIS_PASSWORD_SECRET_ENV}, or set shared_cache_insecure=True for a Redis no "
            "one but your jobs can reach (docs/remote.md)."
        )


SCAN_COUNT = 1000
"""Keys the start-up check's one SCAN looks at (a Redis shared with other data may hold
millions: walking them all would outlast the budget and switch a healthy cache off)."""


def redis_has_entries(url: str, *, timeout_s: float) -> bool:
    """Whether the server at ``url`` answers, and holds inductor's entries (``pt2:*``) among
    the first :data:`SCAN_COUNT` keys one SCAN returns: one round trip, whatever the size."""
    import redis

    client = redis.Redis.from_url(url, socket_timeout=timeout_s, socket_connect_timeout=timeout_s)
    try:
        _, keys = client.scan(cursor=0, match="pt2:*", count=SCAN_COUNT)
        return bool(keys)
    finally:
        client.close()


def ca_certs(environ: Mapping[str, str]) -> str | None:
    """The CA bundle a ``rediss://`` server is checked with (default: the system's)."""
    return environ.get(REDIS_CA_ENV) or None


@dataclass(frozen=True)
class RedisFound:
    """What :func:`open_redis` found; the caller puts it into the job's shared cache.

    ``environment`` holds inductor's remote-cache variables (empty: the job runs
    without them) and the team's keys; ``signed`` whether the job has a key;
    ``remote_cache`` whether they are on (None: Redis was not tried, the engine is not
    inductor); ``not_before`` the team's moment (values signed earlier are withdrawn);
    ``warm`` whether the server holds
    inductor's entries; ``budget_hit`` whether the check outlasted its budget.
    """

    environment: dict[str, str] = field(default_factory=dict)
    remote_cache: bool | None = None
    warm: bool = False
    budget_hit: bool = False
    signed: bool = False
    warnings: tuple[str, ...] = ()
    not_before: int | None = None


def open_redis(
    location: SharedCacheLocation,
    engine: str,
    environ: Mapping[str, str],
    *,
    remote_job: bool,
    gpu: bool,
    insecure: bool,
    timeout_s: float,
) -> RedisFound:
    """Check the Redis at ``location`` within ``timeout_s``; on success, inductor's variables.

    Raises :class:`SharedCacheError` for a remote job's Redis without TLS or
    password (unless ``insecure``); a Redis that cannot be reached, refuses
    the password or does not answer in time leaves the job without them.
    """
    if engine != "inductor":
        return RedisFound(
            warnings=(
                f"shared_cache {location.shown}: Redis serves inductor's caches only; the "
                f"{engine} engine keeps its cache in the checkpoint location",
            )
        )

    def probe() -> tuple[str | None, Keys, bool]:
        password = redis_password(environ, timeout_s=timeout_s)
        check_redis_trust(location, password=password, remote_job=remote_job, insecure=insecure)
        keys = team_keys(environ, timeout_s=timeout_s)
        url = redis_url(location, password, ca_certs=ca_certs(environ))  # this process only
        return password, keys, redis_has_entries(url, timeout_s=min(timeout_s, _CALL_TIMEOUT_S))

    try:
        done, answer = Budget(timeout_s, name="trcomp-shared-redis").run(probe)
    except SharedCacheError:
        raise
    # Broad on purpose: redis-py (refused, wrong password), ssl (a bad certificate) and
    # boto3 (the password's secret) raise errors with no common base, and each of them
    # means the job compiles cold, not that it fails.
    except Exception as exc:
        return RedisFound(
            remote_cache=False,
            warnings=(
                f"cannot use the Redis of shared_cache {location.shown} ({type(exc).__name__}: "
                f"{exc}); the job runs without inductor's remote caches and compiles cold",
            ),
        )
    if not done or answer is None:
        return RedisFound(
            remote_cache=False,
            budget_hit=True,
            warnings=(
                f"the Redis of shared_cache {location.shown} did not answer within "
                f"shared_cache_timeout_s={timeout_s:g}; the job runs without inductor's "
                "remote caches and compiles cold",
            ),
        )
    password, keys, has_entries = answer
    url = redis_url(location, None, ca_certs=ca_certs(environ))
    return RedisFound(
        environment=redis_environment(location, gpu=gpu, url=url, password=password, keys=keys),
        remote_cache=True,
        warm=has_entries,
        signed=bool(keys),
        not_before=keys.not_before,
    )
