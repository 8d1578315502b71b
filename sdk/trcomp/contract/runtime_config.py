"""``RuntimeConfig``: the resolved config the container hands to the user's process.

The container decides what runs (the concrete backend and engine, or eager
after a fallback) and exports it as ``TRCOMP_CONFIG`` with
:meth:`RuntimeConfig.to_env`; :mod:`trcomp.runtime` reads it back with
:meth:`RuntimeConfig.from_env`. These two are the only writer and reader of
the variable. Its JSON keys are documented in docs/environment.md.
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from trcomp._version import __version__
from trcomp.contract.config import (
    Backend,
    Fallback,
    InductorValue,
    Mode,
    TrainingCompilerConfig,
    XlaEngine,
)
from trcomp.contract.keys import CONFIG_ENV
from trcomp.contract.shared_cache import parse_location

__all__ = ["ConcreteBackend", "DeviceKind", "Engine", "RuntimeConfig"]

ConcreteBackend = Literal["xla", "inductor"]
Engine = Literal["inductor", "torch_xla", "jax"]
DeviceKind = Literal["gpu", "tpu", "cpu"]


class RuntimeConfig(BaseModel):
    """The config as resolved in the container; every field defaults to the compiler off.

    The config's own fields keep their names and meaning; ``enabled``,
    ``backend`` and ``engine`` say what actually runs. Unknown keys are ignored,
    so a script with another trcomp version installed still reads the variable.
    """

    # extra="ignore": the reader may be an older trcomp (the user's requirements) than the writer.
    model_config = ConfigDict(frozen=True, extra="ignore")

    enabled: bool = Field(default=False, description="A compiler runs (False: off or fell back).")
    debug: bool = False
    backend: ConcreteBackend | None = Field(
        default=None, description="The backend that runs; None when eager."
    )
    mode: Mode = "default"
    fullgraph: bool = False
    dynamic: bool | None = None
    cache: bool = True
    fallback: Fallback = "eager"
    xla_flags: tuple[str, ...] = ()
    inductor_options: dict[str, InductorValue] = Field(default_factory=dict)
    xla_engine: XlaEngine = "auto"
    auto_compile: bool = True
    keep_faster: bool | None = None
    shared_cache: str | None = Field(
        default=None, description="The config's shared_cache (a URI never holds a password)."
    )
    shared_cache_timeout_s: float = 5.0
    shared_cache_insecure: bool = False
    regional: bool | None = None
    measure_speedup: bool = True
    aot: bool = True
    verify: bool = True
    fast_random: bool = False
    requested_backend: Backend = Field(
        default="auto", description="The config's backend, before `auto` was resolved."
    )
    engine: Engine | None = Field(
        default=None, description="What runs the compiled code; None when eager."
    )
    fallback_reason: str | None = Field(
        default=None, description="Why the job fell back to eager, when it did."
    )
    trcomp_version: str | None = Field(default=None, description="The trcomp that wrote it.")
    device_kind: DeviceKind | None = Field(
        default=None, description="What the host has: `gpu` (NVIDIA), `tpu` or `cpu`."
    )

    @property
    def keeps_faster(self) -> bool:
        """Whether the job runs eager when its compiled steps measure slower.

        ``keep_faster`` when set; else on for ``backend="auto"``, off for an explicit backend.
        """
        if self.keep_faster is not None:
            return self.keep_faster
        return self.requested_backend == "auto"

    @property
    def compiles_regionally(self) -> bool:
        """Whether repeated blocks are marked as nested compile regions (``regional``).

        Only when ``regional=True``: None means off, because torch 2.9's nested compile
        regions gave wrong gradients for some blocks (docs/configuration.md).
        """
        return self.regional is True

    def compile_kwargs(self) -> dict[str, Any]:
        """The ``torch.compile`` arguments: only what differs from its defaults (pure)."""
        kwargs: dict[str, Any] = {"backend": "inductor"}
        if self.mode != "default":
            kwargs["mode"] = self.mode
        if self.fullgraph:
            kwargs["fullgraph"] = True
        if self.dynamic is not None:
            kwargs["dynamic"] = self.dynamic
        return kwargs

    @classmethod
    def resolved(
        cls,
        config: TrainingCompilerConfig,
        *,
        backend: ConcreteBackend | None,
        engine: Engine | None,
        fallback_reason: str | None = None,
        device_kind: DeviceKind | None = None,
    ) -> RuntimeConfig:
        """``config`` with ``backend`` and ``engine`` made concrete (None for both: eager)."""
        fields: dict[str, Any] = {
            **config.model_dump(),
            "enabled": backend is not None,
            "backend": backend,
            "requested_backend": config.backend,
            "engine": engine,
            "fallback_reason": fallback_reason,
            "trcomp_version": __version__,
            "device_kind": device_kind,
        }
        if config.shared_cache:
            fields["shared_cache"] = parse_location(config.shared_cache).shown
        return cls(**fields)

    def to_env(self) -> dict[str, str]:
        """``{"TRCOMP_CONFIG": <JSON>}``, to merge into the user's process environment."""
        return {CONFIG_ENV: json.dumps(self.model_dump(mode="json"))}

    @classmethod
    def from_json(cls, text: str | None) -> RuntimeConfig:
        """Parse the variable's value; unset, empty or not an object means the compiler is off."""
        if not text:
            return cls()
        try:
            body: Any = json.loads(text)
        except json.JSONDecodeError as exc:
            raise ValueError(
                f"{CONFIG_ENV} is not valid JSON ({exc}); it is set by the trcomp container: "
                "unset it to run eager"
            ) from None
        if not isinstance(body, dict):
            return cls()
        try:
            return cls.model_validate(body)
        except ValidationError as exc:
            problems = "; ".join(
                f"{'.'.join(map(str, err['loc']))}: {err['msg']}" for err in exc.errors()
            )
            raise ValueError(
                f"{CONFIG_ENV} is not a config trcomp {__version__} can read ({problems}); it "
                "is set by the trcomp container: unset it to run eager"
            ) from None

    @classmethod
    def from_env(cls, environ: Mapping[str, str] | None = None) -> RuntimeConfig:
        """The config in ``environ`` (default ``os.environ``); compiler off when unset."""
        return cls.from_json((os.environ if environ is None else environ).get(CONFIG_ENV))
