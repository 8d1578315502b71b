"""The shared round: the first step of a job of another lineage, warmed from a shared cache.

Each compiled (workload, backend) gets a shared compile cache location of its
own, a directory under the bench's temporary root used as ``file://...``, and
goes through the container's own shared-cache code
(:mod:`trcomp_container.caching.shared`) with the calls a job with
``shared_cache=`` makes:

- the cold run is the first job: :func:`open_lineage` opens the (empty) shared
  location on its cache dir before it runs, and :func:`share` writes what it
  compiled as an entry after it succeeded;
- the warm runs reuse that cache dir (the same lineage) with the same engine
  environment (:attr:`Shared.environment`: on the jax engine, JAX's XLA
  sub-caches off, without which entries only load from the path they were
  written at);
- the shared run (:func:`open_fresh`) is a job of another lineage: a fresh,
  empty cache dir that only the shared location fills. If it fills nothing,
  :class:`NothingShared` says so; its first step would be a cold one.

Nothing here imports torch; the container's modules are imported when used.
"""

from __future__ import annotations

import functools
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from trcomp_bench.backends import get_backend

if TYPE_CHECKING:
    from trcomp_container.caching.compat import CompatSet
    from trcomp_container.caching.shared import SharedCache

__all__ = ["NothingShared", "Shared", "engine_of", "open_fresh", "open_lineage", "share"]

# Under the bench's temporary root; workload directories never start with a dot.
_STORES = ".shared-store"
_FRESH = ".shared-live"
_BUDGET_S = 600.0


class NothingShared(RuntimeError):
    """The shared location gave a fresh cache dir no files."""


@dataclass
class Shared:
    """One (workload, backend)'s shared cache: where, the open cache, what the cold run wrote."""

    uri: str
    cache: SharedCache
    written: dict[str, Any] | None = None  # SharedCache.finish's facts, once the cold run shared

    @property
    def environment(self) -> dict[str, str]:
        """The variables a job with this ``shared_cache`` gets (engine settings)."""
        return dict(self.cache.environment)


def engine_of(backend: str) -> str | None:
    """The container engine of a bench backend; None for eager (nothing to share)."""
    spec = get_backend(backend)
    if spec.compiler == "eager":
        return None
    if spec.engine == "jax":
        return "jax"
    return "inductor" if spec.compiler == "inductor" else "torch_xla"


@functools.cache
def _compat(engine: str) -> CompatSet:
    from trcomp_container.caching.compat import compat_set
    from trcomp_container.devices import list_gpus

    return compat_set(engine=engine, gpu_listing=list_gpus())


def _safe(key: str) -> str:
    return key.replace(":", "_").replace("/", "_")


def _open(uri: str, engine: str, live: Path, environ: Mapping[str, str]) -> SharedCache:
    from trcomp_container.caching.shared import open_shared_cache

    # A local directory: the measurement must see the whole cache, never a budget cut short.
    return open_shared_cache(
        uri,
        compat=_compat(engine),
        engine=engine,
        live=live,
        environ=environ,
        remote_job=False,
        timeout_s=_BUDGET_S,
    )


def open_lineage(
    root: Path, key: str, backend: str, live: Path, environ: Mapping[str, str]
) -> Shared:
    """Open ``key``'s shared location for the cold run's cache dir ``live`` (job start)."""
    engine = engine_of(backend)
    if engine is None:
        raise ValueError(f"{backend} compiles nothing: it has no shared cache")
    store = (root / _STORES / _safe(key)).resolve()
    store.mkdir(parents=True, exist_ok=True)
    uri = f"file://{store}"
    return Shared(uri, _open(uri, engine, live, environ))


def share(shared: Shared, live: Path) -> dict[str, Any]:
    """Write what the cold run compiled into ``live`` to the shared location (job end)."""
    shared.written = dict(shared.cache.finish(live, succeeded=True))
    return shared.written


def open_fresh(
    shared: Shared, root: Path, key: str, backend: str, environ: Mapping[str, str]
) -> tuple[Path, SharedCache]:
    """A fresh, empty cache dir for ``key``, filled from ``shared``'s location (a new lineage).

    Raises :class:`NothingShared` when the read brought no files.
    """
    engine = engine_of(backend)
    if engine is None:
        raise ValueError(f"{backend} compiles nothing: it has no shared cache")
    live = (root / _FRESH / _safe(key)).resolve()
    if live.exists():
        raise FileExistsError(f"{live} exists: a shared run starts from an empty cache dir")
    cache = _open(shared.uri, engine, live, environ)
    if not cache.facts.get("files_read"):
        written = shared.written or {}
        said = "; ".join([*written.get("warnings", []), *cache.warnings])
        raise NothingShared(
            f"the shared compile cache {shared.uri} gave a fresh cache dir no files (the cold "
            f"run wrote {written.get('files_written', 0)} files there"
            f"{'; ' + said if said else ''}), so its first step would be a cold one"
        )
    return live, cache
