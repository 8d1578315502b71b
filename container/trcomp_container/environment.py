"""The one place where a resolved compiler config becomes environment variables.

Pure: takes the job, the config and the resolved backend and engine, returns
the child's environment. Every variable set here is documented in docs/environment.md.
Variables that encode a decision (backend, device, TRCOMP_*) always win;
cache and debug locations yield to a value the user already set.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path

from trcomp.contract.config import TrainingCompilerConfig
from trcomp.contract.env import BACKEND_ENV, COMPILER_DIR_ENV, DEBUG_ENV, METRICS_DIR_ENV
from trcomp.contract.keys import CACHE_DIR_ENV
from trcomp.contract.runtime_config import RuntimeConfig
from trcomp_container.backends import ConcreteBackend, Engine, inductor, xla
from trcomp_container.backends import jax as jax_engine
from trcomp_container.devices import Devices
from trcomp_container.job import JobPaths

__all__ = ["CACHE_LOCATION_ENV", "HOOK_DIR", "build_environment"]

HOOK_DIR = Path(__file__).resolve().parent / "hook"

CACHE_LOCATION_ENV = (
    "TORCHINDUCTOR_CACHE_DIR",
    "TRITON_CACHE_DIR",
    "XLA_PERSISTENT_CACHE_PATH",
    "JAX_COMPILATION_CACHE_DIR",
)
"""Where the compilers load cached code from. A value the user set wins in a keyless job;
a job with the team's key never hands one on (``training._training_base``): there the
compilers load only from the live cache, which holds nothing unchecked."""


def build_environment(
    *,
    config: TrainingCompilerConfig,
    backend: ConcreteBackend | None,
    engine: Engine | None,
    devices: Devices,
    paths: JobPaths,
    base_env: Mapping[str, str],
    metrics_dir: Path,
    scratch_dir: Path,
    fallback_reason: str | None = None,
    cache_dir: Path | None = None,
    keyed: bool = False,
) -> dict[str, str]:
    """The user's process environment: ``base_env`` plus the compiler's variables.

    ``base_env`` is the entrypoint's own environment merged with the toolkit's
    SM_* variables. ``backend`` and ``engine`` are the job's, resolved once by
    the entrypoint (None: compiler off). ``cache_dir`` is where the compilers
    write their caches while the job runs (default: ``paths.cache``; the
    entrypoint passes a local dir, see :mod:`trcomp_container.caching.lineage`).
    ``scratch_dir`` holds throw-away compile caches when ``config.cache`` is
    False, so every such job starts cold. ``keyed`` (a job with the team's key): the
    jax engine's cache is in the live dir too, not the checkpoint location, so that JAX
    loads only what the signed lineage restored (:mod:`.caching.lineage_signed`).
    """
    env = dict(base_env)
    resolved = RuntimeConfig.resolved(
        config,
        backend=backend,
        engine=engine,
        fallback_reason=fallback_reason,
        device_kind=devices.kind,
    )
    decided: dict[str, str] = {
        **resolved.to_env(),
        BACKEND_ENV: backend or "eager",
        METRICS_DIR_ENV: str(metrics_dir),
        DEBUG_ENV: "1" if config.debug else "0",
        "PYTHONPATH": os.pathsep.join(
            [str(HOOK_DIR), str(paths.code), *filter(None, [base_env.get("PYTHONPATH")])]
        ),
        "PYTHONUNBUFFERED": "1",
    }
    defaults: dict[str, str] = {}
    # The live dir also holds what the shared cache (shared_cache=) reads and writes.
    kept = config.cache or config.shared_cache is not None
    cache_root = (cache_dir or paths.cache) if kept else scratch_dir
    if config.cache and backend is not None:
        # Where the hook keeps what the next job of the lineage reuses (the speed-up decision).
        decided[CACHE_DIR_ENV] = str(cache_root)
    if backend == "inductor":
        decided.update(inductor.environment(config))
        defaults.update(inductor.cache_environment(cache_root))
        if config.debug:
            defaults.update(inductor.debug_environment(paths.compiler))
    elif engine == "jax":
        decided.update(jax_engine.environment(config, devices, base_env))
        if keyed:  # the live dir; without JAX's XLA sub-caches no key holds its path
            defaults.update(jax_engine.cache_environment(cache_root))
            defaults["JAX_PERSISTENT_CACHE_ENABLE_XLA_CACHES"] = "none"
        else:
            # Not the live dir: JAX puts a path under its cache dir into every cache
            # key, and the live dir's path changes from job to job. Its cache is a few
            # files per program, fine to write straight into the checkpoint dir.
            jax_root = paths.cache if config.cache else scratch_dir
            defaults.update(jax_engine.cache_environment(jax_root))
        if config.debug:
            debug = jax_engine.debug_environment(paths.compiler, decided.get("XLA_FLAGS", ""))
            decided["XLA_FLAGS"] = debug.pop("XLA_FLAGS")
            defaults.update(debug)
    elif backend == "xla":
        decided.update(xla.environment(config, devices, base_env))
        defaults.update(xla.cache_environment(cache_root))
        if config.debug:
            debug = xla.debug_environment(paths.compiler, decided.get("XLA_FLAGS", ""))
            decided["XLA_FLAGS"] = debug.pop("XLA_FLAGS")
            defaults.update(debug)
    else:
        # Compiler off: transformers must not grab the XLA device of an installed torch-xla.
        decided["USE_TORCH_XLA"] = "0"
    if config.debug and backend is not None:
        decided[COMPILER_DIR_ENV] = str(paths.compiler)
    for key, value in defaults.items():
        env.setdefault(key, value)
    env.update(decided)
    return env
