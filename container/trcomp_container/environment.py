"""The one place where a resolved compiler config becomes environment variables.

Pure: takes the job, the config and the resolved backend, returns the child's
environment. Every variable set here is documented in docs/environment.md.
Variables that encode a decision (backend, device, TRCOMP_*) always win;
cache and debug locations yield to a value the user already set.
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from trcomp._version import __version__
from trcomp.config import TrainingCompilerConfig
from trcomp_container.backends import ConcreteBackend, inductor, xla
from trcomp_container.devices import Devices
from trcomp_container.job import JobPaths

__all__ = ["HOOK_DIR", "build_environment", "resolved_config"]

HOOK_DIR = Path(__file__).resolve().parent / "hook"


def resolved_config(
    config: TrainingCompilerConfig,
    backend: ConcreteBackend | None,
    fallback_reason: str | None = None,
) -> dict[str, Any]:
    """The ``TRCOMP_CONFIG`` body: the config with ``backend`` made concrete.

    ``enabled`` is False when the compiler is off or fell back to eager;
    ``backend`` is then None.
    """
    body = config.model_dump(mode="json")
    body.update(
        enabled=backend is not None,
        backend=backend,
        requested_backend=config.backend,
        fallback_reason=fallback_reason,
        trcomp_version=__version__,
    )
    return body


def build_environment(
    *,
    config: TrainingCompilerConfig,
    backend: ConcreteBackend | None,
    devices: Devices,
    paths: JobPaths,
    base_env: Mapping[str, str],
    metrics_dir: Path,
    scratch_dir: Path,
    fallback_reason: str | None = None,
    cache_dir: Path | None = None,
) -> dict[str, str]:
    """The user's process environment: ``base_env`` plus the compiler's variables.

    ``base_env`` is the entrypoint's own environment merged with the toolkit's
    SM_* variables. ``cache_dir`` is where the compilers write their caches
    while the job runs (default: ``paths.cache``; the entrypoint passes a local
    dir, see :mod:`trcomp_container.cache`). ``scratch_dir`` holds throw-away
    compile caches when ``config.cache`` is False, so every such job starts cold.
    """
    env = dict(base_env)
    decided: dict[str, str] = {
        "TRCOMP_CONFIG": json.dumps(resolved_config(config, backend, fallback_reason)),
        "TRCOMP_BACKEND": backend or "eager",
        "TRCOMP_METRICS_DIR": str(metrics_dir),
        "TRCOMP_DEBUG": "1" if config.debug else "0",
        "PYTHONPATH": os.pathsep.join(
            [str(HOOK_DIR), str(paths.code), *filter(None, [base_env.get("PYTHONPATH")])]
        ),
        "PYTHONUNBUFFERED": "1",
    }
    defaults: dict[str, str] = {}
    cache_root = (cache_dir or paths.cache) if config.cache else scratch_dir
    if backend == "inductor":
        decided.update(inductor.environment(config))
        defaults.update(inductor.cache_environment(cache_root))
        if config.debug:
            defaults.update(inductor.debug_environment(paths.compiler))
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
        decided["TRCOMP_COMPILER_DIR"] = str(paths.compiler)
    for key, value in defaults.items():
        env.setdefault(key, value)
    env.update(decided)
    return env
