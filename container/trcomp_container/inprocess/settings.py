"""The one reader of the environment inside the user's process.

The container writes the resolved config (``TRCOMP_CONFIG``, read with the
contract's ``RuntimeConfig.from_env``) and a few paths; everything the
in-process package needs to know about its job comes from :class:`Settings`,
read once. The config's own fields (backend, debug, inductor options) are read
from the config, never from the variables that echo them for scripts
(``TRCOMP_BACKEND``, ``TRCOMP_DEBUG``, ``TRCOMP_INDUCTOR_OPTIONS``, documented in
docs/environment.md). Standard library only at import: the config is parsed
(pydantic) only when asked for, after the script imported torch.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from trcomp.contract.env import (
    CACHE_DIR_ENV,
    COMPILER_DIR_ENV,
    CONFIG_ENV,
    METRICS_DIR_ENV,
    SECRET_NAMES,
)
from trcomp_container import environ_block
from trcomp_container.inprocess.redis_handoff import RedisHandoff

__all__ = ["Settings"]


@dataclass(frozen=True)
class Settings:
    """What the job told this process, read once at start-up."""

    metrics_dir: Path | None
    """``TRCOMP_METRICS_DIR``: where the per-rank record goes; None: the hook stays off."""
    rank: int = 0
    """``RANK`` (torchrun), 0 outside a distributed job."""
    local_rank: int = 0
    """``LOCAL_RANK``."""
    world_size: str = "1"
    """``WORLD_SIZE``, as text (part of the speed-up decision's key)."""
    cache_dir: Path | None = None
    """``TRCOMP_CACHE_DIR``: the job's compile cache that the next job reuses; None: off."""
    compiler_dir: Path | None = None
    """``TRCOMP_COMPILER_DIR``: where debug reports go (``debug=True``)."""
    inductor_cache_dir: str | None = None
    """``TORCHINDUCTOR_CACHE_DIR``: inductor's cache (the precompiled headers go there too)."""
    redis: RedisHandoff | None = field(default=None, repr=False)
    """A Redis shared cache's URL, caches, password and keys (:mod:`.redis_handoff`),
    taken out of the process's environment as the hook starts; None: no Redis cache here."""
    config_text: str | None = field(default=None, repr=False)
    _config: list[Any] = field(default_factory=list, repr=False, compare=False)

    @classmethod
    def from_env(cls, environ: Mapping[str, str] | None = None) -> Settings:
        """Read the process environment (``environ``: for tests). From the process's own,
        with the hook on, the Redis handoff is taken out (:meth:`.RedisHandoff.take`)."""
        env = os.environ if environ is None else environ
        metrics = env.get(METRICS_DIR_ENV)
        cache = env.get(CACHE_DIR_ENV)
        compiler = env.get(COMPILER_DIR_ENV)
        if environ is None and metrics:
            redis = RedisHandoff.take(os.environ)
            environ_block.blank(SECRET_NAMES)  # nor in /proc/<pid>/environ, for children
        else:
            redis = RedisHandoff.from_env(env) if metrics else None
        return cls(
            metrics_dir=Path(metrics) if metrics else None,
            rank=int(env.get("RANK", "0") or 0),
            local_rank=int(env.get("LOCAL_RANK", "0") or 0),
            world_size=env.get("WORLD_SIZE", "1"),
            cache_dir=Path(cache) if cache else None,
            compiler_dir=Path(compiler) if compiler else None,
            inductor_cache_dir=env.get("TORCHINDUCTOR_CACHE_DIR") or None,
            redis=redis,
            config_text=env.get(CONFIG_ENV) or None,
        )

    @property
    def enabled(self) -> bool:
        """Whether the hook runs in this process (the job set a metrics directory)."""
        return self.metrics_dir is not None

    def config(self) -> Any:
        """The resolved config (a ``RuntimeConfig``), or None outside a job; parsed once."""
        if not self._config:
            parsed = None
            if self.config_text:
                from trcomp.contract.runtime_config import RuntimeConfig

                parsed = RuntimeConfig.from_json(self.config_text)
            self._config.append(parsed)
        return self._config[0]

    @property
    def backend(self) -> str:
        """The backend in one word (``inductor``, ``xla``), ``eager`` when none runs."""
        config = self.config()
        return str(config.backend) if config is not None and config.backend else "eager"

    @property
    def debug(self) -> bool:
        """``debug=True``: the debug reports are written too."""
        config = self.config()
        return bool(config is not None and config.debug)

    @property
    def inductor_options(self) -> dict[str, Any]:
        """The inductor options of the job under the inductor backend (applied once, when
        torch is imported); none under another backend.

        The config's ``inductor_options``, and ``fallback_random`` unless ``fast_random``
        (or the options) say otherwise: compiled code draws eager's random numbers.
        """
        config = self.config()
        if config is None or config.backend != "inductor":
            return {}
        options = dict(config.inductor_options)
        if config.enabled and not getattr(config, "fast_random", False):
            options.setdefault("fallback_random", True)
        return options
