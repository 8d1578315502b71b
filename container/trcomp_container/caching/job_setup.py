"""What the entrypoint does about compile caches beyond the lineage's (:mod:`.lineage`).

Two things, both decided before the start-up check compiles anything:

- the shared cache (``shared_cache=``): read into the live cache dir, with the
  compatibility set of this host, written back by the job's first host only
  (:func:`open_for_job`);
- the lineage's files, restored after the shared cache's and never signed
  into the job's entry (:func:`restore_lineage`); in a job with the team's key, only
  those a keyed job signed in the checkpoint location (:func:`signed_lineage`);
- the variables the user's process gets for it, and ``TORCH_COMPILE_JOB_ID``
  for inductor's profile-guided dynamic shapes (:func:`cache_variables`).
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path

from trcomp.contract.config import TrainingCompilerConfig
from trcomp.contract.env import KEY_ENV, KEY_SECRET_ENV
from trcomp.contract.instances import DOCKER_LOCAL_MODES, PROCESS_MODE
from trcomp_container.backends import ConcreteBackend, Engine, inductor
from trcomp_container.caching import lineage
from trcomp_container.caching.cache_secrets import team_keys
from trcomp_container.caching.compat import compat_set
from trcomp_container.caching.lineage_signed import SignedLineage
from trcomp_container.caching.shared import SharedCache, open_shared_cache
from trcomp_container.devices import Devices, list_gpus
from trcomp_container.job import Job

__all__ = ["cache_variables", "is_keyed", "open_for_job", "restore_lineage", "signed_lineage"]


def is_keyed(environ: Mapping[str, str]) -> bool:
    """Whether the job has the team's key (or the name of the secret holding it)."""
    return any(environ.get(name) for name in (KEY_ENV, KEY_SECRET_ENV))


def open_for_job(
    config: TrainingCompilerConfig,
    job: Job,
    devices: Devices,
    live: Path,
    *,
    engine: Engine | None,
) -> SharedCache | None:
    """Read the config's shared cache into ``live``; None when there is none or no compiler.

    ``engine`` is the job's, resolved once by the entrypoint (None: compiler off).
    """
    if not config.shared_cache or engine is None:
        return None
    compat = compat_set(engine=engine, gpu_listing=list_gpus() if devices.gpus else None)
    environ = dict(job.environ)
    region = str(job.framework_params.get("sagemaker_region") or "")
    if region and not environ.get("AWS_REGION"):
        environ["AWS_REGION"] = region
    local = job.instance_type in (PROCESS_MODE, *DOCKER_LOCAL_MODES) or not job.instance_type
    # One entry per job: the first host writes it (the torchrun master, launch.py).
    writer = not job.hosts or job.current_host == sorted(job.hosts)[0]
    return open_shared_cache(
        config.shared_cache,
        compat=compat,
        engine=engine,
        live=live,
        environ=environ,
        remote_job=not local,
        gpu=devices.gpus > 0,
        timeout_s=config.shared_cache_timeout_s,
        insecure=config.shared_cache_insecure,
        writer=writer,
    )


def signed_lineage(
    environ: Mapping[str, str], shared: SharedCache | None, *, timeout_s: float
) -> SignedLineage | None:
    """A keyed job's lineage (:mod:`.lineage_signed`), with the keys the shared cache
    already read, else read here; None for a job without the key.

    Raises :class:`~trcomp.contract.errors.SharedCacheError` when the key cannot be read:
    a keyed job never falls back to trusting its checkpoint location.
    """
    if not is_keyed(environ):
        return None
    if shared is not None and shared.keys:
        return SignedLineage(shared.keys)
    return SignedLineage(team_keys(environ, timeout_s=timeout_s))


def restore_lineage(
    persistent: Path, live: Path, shared: SharedCache | None, signed: SignedLineage | None = None
) -> int:
    """Copy the lineage's cache (``persistent``, in the checkpoint location) into ``live``,
    after the shared cache's files; the number of files copied.

    The checkpoint location is not the shared cache's trust boundary: whoever can write
    that prefix (the default one is predictable) could plant files there. In a keyed job
    (``signed``) only files a keyed job signed there are copied. Either way the files
    copied here stay out of the entry the job signs at the end, unless the job writes
    them again (:meth:`SharedCache.keep_out`).
    """
    if signed is not None:
        copied = signed.restore(persistent, live)
    else:
        copied = lineage.restore_paths(persistent, live)
    if shared is not None:
        shared.keep_out(live, copied)
    return len(copied)


def cache_variables(
    config: TrainingCompilerConfig,
    backend: ConcreteBackend | None,
    job: Job,
    shared: SharedCache | None,
    lineage: str,
) -> dict[str, str]:
    """Variables for the user's process: the shared cache's, and the PGO job id.

    The id follows the cache the job reads first: the shared location when
    there is one, else the lineage's (``lineage``, the checkpoint location).
    """
    variables: dict[str, str] = {}
    if backend == "inductor" and (config.cache or shared is not None):
        where = shared.location.shown if shared is not None else lineage
        variables.update(inductor.pgo_environment(where, job.entry_point or ""))
    if shared is not None:
        variables.update(shared.environment)
    return variables
