"""``TrainingCompilerConfig``: the one switch, and its hyperparameter codec.

The same pydantic model is used on both sides of a job: the SDK serializes it
into the job's hyperparameters (:meth:`TrainingCompilerConfig.to_hyperparameters`)
and the container rebuilds it (:meth:`TrainingCompilerConfig.from_hyperparameters`).
The SDK's ``trcomp.TrainingCompilerConfig`` subclasses this model to add the
checks against an estimator (:mod:`trcomp.config`); this one knows no estimator.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from typing import Any, ClassVar, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

from trcomp._version import __version__
from trcomp.contract.errors import CompilerConfigError
from trcomp.contract.hyperparameter_values import (
    SHOWN_CHARS,
    decode_bool,
    decode_object,
    shown,
    shown_json,
)
from trcomp.contract.instances import supported_gpu_families
from trcomp.contract.keys import CONFIG_KEY, DEBUG_KEY, ENABLED_KEY, VERSION_FIELD
from trcomp.contract.limits import check_limits
from trcomp.contract.shared_cache import parse_location

__all__ = [
    "Backend",
    "Fallback",
    "InductorValue",
    "Mode",
    "TrainingCompilerConfig",
    "XlaEngine",
    "torch_has_aot",
]

Backend = Literal["auto", "xla", "inductor"]
Mode = Literal["default", "reduce-overhead", "max-autotune", "max-autotune-no-cudagraphs"]
Fallback = Literal["eager", "fail"]
XlaEngine = Literal["auto", "torch_xla", "jax"]
AOT_TORCH = (2, 14)
"""The first torch with ``aot_compile`` that trcomp runs (torch 2.9 has none)."""


def torch_has_aot(version: str) -> bool:
    """Whether torch ``version`` (``2.14``, ``2.14.1+cu130``) is one the ``aot`` field acts on."""
    try:
        major, minor = (int(part) for part in version.split("+")[0].split(".")[:2])
    except ValueError:
        return False
    return (major, minor) >= AOT_TORCH


InductorValue = bool | int | float | str

# Matched with fullmatch: "$" would accept a trailing newline.
_XLA_FLAG = re.compile(r"--xla_[a-z0-9_]+(=\S+)?")
_INDUCTOR_KEY = re.compile(r"[A-Za-z_][A-Za-z0-9_]*(\.[A-Za-z_][A-Za-z0-9_]*)*")
# Fields added after the first release: left out of the hyperparameters at their default.
_NEWER_FIELDS = (
    "xla_engine",
    "shared_cache",
    "shared_cache_timeout_s",
    "shared_cache_insecure",
    "auto_compile",
    "keep_faster",
    "regional",
    "measure_speedup",
    "aot",
    "verify",
    "fast_random",
)


class TrainingCompilerConfig(BaseModel):
    """Turn the training compiler on for a SageMaker-style job.

    Pass it as ``compiler_config=`` to :class:`trcomp.PyTorch`,
    :class:`trcomp.HuggingFace` or :class:`trcomp.Estimator`. In the container
    each field becomes environment variables (see docs/environment.md).
    """

    model_config = ConfigDict(frozen=True, extra="forbid", validate_default=True)

    # The AWS class's attributes, same names and meaning (docs/migration.md).
    HP_ENABLE_COMPILER: ClassVar[str] = ENABLED_KEY
    HP_ENABLE_DEBUG: ClassVar[str] = DEBUG_KEY
    HP_CONFIG: ClassVar[str] = CONFIG_KEY
    """trcomp's third hyperparameter: the whole config as one JSON object."""
    DEBUG_PATH: ClassVar[str] = "/opt/ml/output/data/compiler/"
    SUPPORTED_INSTANCE_CLASS_PREFIXES: ClassVar[list[str]] = supported_gpu_families()
    """The NVIDIA GPU families trcomp knows; others are refused or warned about."""

    enabled: bool = Field(
        default=True,
        description="Compile the training script. False runs it eager. "
        "Hyperparameter `sagemaker_training_compiler_enabled`.",
    )
    debug: bool = Field(
        default=False,
        description="Write compiler logs, graphs and metrics to "
        "/opt/ml/output/data/compiler/ (they end up in output.tar.gz). "
        "Hyperparameter `sagemaker_training_compiler_debug_mode`.",
    )
    backend: Backend = Field(
        default="auto",
        description="Which compiler: `inductor` (torch.compile), `xla` (torch-xla), or "
        "`auto`: inductor on NVIDIA GPUs and on CPU, so that local runs exercise the "
        "compiler the GPU job will use (xla on a TPU host, which nothing has tested: "
        "SageMaker has no TPU instances). Env `TRCOMP_BACKEND`.",
    )
    mode: Mode = Field(
        default="default",
        description="torch.compile mode (inductor only; any other value with "
        "backend='xla' is an error). Env `ACCELERATE_DYNAMO_MODE`.",
    )
    fullgraph: bool = Field(
        default=False,
        description="torch.compile fullgraph: a graph break becomes an error instead of a "
        "silent fallback (inductor only). Env `ACCELERATE_DYNAMO_USE_FULLGRAPH`.",
    )
    dynamic: bool | None = Field(
        default=None,
        description="torch.compile dynamic shapes: None lets torch decide after the first "
        "recompile, True compiles shape-generic graphs at once, False never does "
        "(inductor only). Env `ACCELERATE_DYNAMO_USE_DYNAMIC`.",
    )
    cache: bool = Field(
        default=True,
        description="Keep compile caches under /opt/ml/checkpoints/ so the next job that "
        "uses the same checkpoint location starts warm.",
    )
    fallback: Fallback = Field(
        default="eager",
        description="What the container does when the compiler cannot start: `eager` runs "
        "the script uncompiled with a loud warning in the summary, `fail` fails the job.",
    )
    xla_flags: list[str] = Field(
        default_factory=list,
        description="Extra XLA flags, each `--xla_name` or `--xla_name=value`; merged into "
        "`XLA_FLAGS` (xla only).",
    )
    inductor_options: dict[str, InductorValue] = Field(
        default_factory=dict,
        description="torch._inductor.config overrides, e.g. "
        "`{'triton.cudagraphs': False}` (inductor only). Env `TRCOMP_INDUCTOR_OPTIONS`.",
    )

    xla_engine: XlaEngine = Field(
        default="auto",
        description="Which engine runs backend='xla': `torch_xla` (CPU), `jax` "
        "(torchax on JAX, experimental; the one engine for NVIDIA GPUs, and allowed on CPU "
        "so local runs exercise it), or `auto`: jax on NVIDIA GPUs, torch_xla elsewhere. "
        "Scripts use trcomp.runtime.compile_step on the jax engine. Env `TRCOMP_XLA_ENGINE`.",
    )
    shared_cache: str | None = Field(
        default=None,
        description="A compile cache shared by every job that names it: `s3://bucket/prefix` "
        "(a bucket of the job's own account), `file:///path` (a shared file system, or a "
        "local directory in local modes) or `redis://host:port` (inductor's remote caches). "
        "Read when the job starts, written when it succeeds; with `cache` on too, the shared "
        "cache is read first, the checkpoint location second. See docs/remote.md.",
    )
    shared_cache_timeout_s: float = Field(
        default=5.0,
        gt=0,
        le=600,
        description="The most seconds the shared cache's read at the start and its write at "
        "the end may each take (every store call included): past it the job starts with what "
        "was read by then (cold, if nothing), or ends without sharing, and the summary says "
        "so (`read_budget_hit`, `write_budget_hit`). A hung store never makes a job wait.",
    )
    shared_cache_insecure: bool = Field(
        default=False,
        description="Trust an S3 or Redis shared cache's location alone: let a job without "
        "the team's key (`TRCOMP_SHARED_CACHE_KEY[_SECRET]`) use it, and a SageMaker job use "
        "a Redis without TLS (`redis://`) or without a password. Off: such a job is refused "
        "before it starts, because whoever else may write there could put code there that "
        "every job reading it runs. Turn it on only for a bucket only your jobs may write or "
        "a Redis on a network no one but your jobs reaches (docs/remote.md).",
    )

    auto_compile: bool = Field(
        default=True,
        description="Compile a plain PyTorch loop with no code change: during the first "
        "optimizer step the start-up hook compiles, in place, each outermost module the "
        "script calls in training mode with trainable parameters (inductor only; a model "
        "the script compiled itself is left as it is). False: only what the script "
        "compiles (trcomp.runtime, torch.compile, HF Trainer/Accelerate) is compiled.",
    )
    keep_faster: bool | None = Field(
        default=None,
        description="After measuring eager against compiled steps in the job, run the rest "
        "of the job eager when the compiled steps are slower (beyond 5% noise). None: on "
        "for backend='auto', off for an explicit backend (which then measures and reports "
        "only). Inductor only.",
    )

    regional: bool | None = Field(
        default=None,
        description="Regional compilation: mark a model's repeated blocks (GPT2Block, "
        "BertLayer, TransformerEncoderLayer: the children of an nn.ModuleList or "
        "nn.Sequential that share one class) as one nested compile region, compiled once "
        "for every layer, then compile the model, so the cold compile grows little with "
        "the number of layers and the model stays one graph. Applies to the zero-code path "
        "and trcomp.runtime.compile; a model without repeated blocks, whose block is not "
        "one graph, or whose blocks have frozen parameters, buffers or activation "
        "checkpointing (patterns where torch 2.9's regions gave wrong gradients) is compiled "
        "whole. None: off (whole-model compile). True: on, and HF Trainer/Accelerate get "
        "Accelerate's per-block regional compilation "
        "(env `ACCELERATE_DYNAMO_USE_REGIONAL_COMPILATION`). False: whole-model compile. "
        "Inductor only.",
    )

    measure_speedup: bool = Field(
        default=True,
        description="Measure the job's own speed-up over eager: a few optimizer steps "
        "(8 to 11) run eager between compiled ones, on every rank, and the summary reports "
        "the ratio. False: no eager steps, no measurement, and keep_faster cannot apply. "
        "The window is skipped on its own when the compiled steps' peak GPU memory is above "
        "80% of the device's. Inductor only.",
    )

    aot: bool = Field(
        default=True,
        description="Warm starts from ahead-of-time artifacts, where torch has them "
        "(torch >= 2.14, framework_version='2.14'): the model the zero-code path compiles "
        "is compiled ahead of time (forward and backward, one graph) at its first compiled "
        "call and saved in the compile cache; the next job of the lineage, or one reading "
        "the same shared_cache, loads it instead of tracing and compiling. Used only when "
        "it fits (versions, machine, model structure, input signature, source unchanged, "
        "torch's guards); anything else takes the normal torch.compile path and the "
        "summary says which ran. Needs cache=True. False: always trace and compile. "
        "Inductor only.",
    )

    verify: bool = Field(
        default=True,
        description="Check each graph the zero-code path compiles against eager at its "
        "first call, on copies of its inputs (outputs, input gradients, in-place changes, "
        "the random stream), so the script's code runs once: a module whose graph differs "
        "or fails stays eager, named in the summary. Costs each graph run twice on copies, "
        "once. False: compiled code trains unchecked, so a compiler bug can change or stop "
        "the job. Inductor only.",
    )

    fast_random: bool = Field(
        default=False,
        description="Let compiled code draw random numbers (dropout) with inductor's own "
        "generator: faster, but the script's random stream changes (dropout masks, and "
        "data order from the next draw on), so the job no longer matches a compiler-off "
        "job. False: compiled code draws the same numbers as eager "
        "(torch._inductor.config.fallback_random). Inductor only.",
    )

    @field_validator("xla_flags")
    @classmethod
    def _check_xla_flags(cls, flags: list[str]) -> list[str]:
        for flag in flags:
            if not _XLA_FLAG.fullmatch(flag):
                raise ValueError(
                    f"xla_flags entry {shown(flag)} is not an XLA flag: write it as "
                    "'--xla_name' or '--xla_name=value' (no spaces)"
                )
        return flags

    @field_validator("shared_cache")
    @classmethod
    def _check_shared_cache(cls, uri: str | None) -> str | None:
        if uri is not None:
            parse_location(uri)
        return uri

    @field_validator("inductor_options")
    @classmethod
    def _check_inductor_keys(cls, options: dict[str, InductorValue]) -> dict[str, InductorValue]:
        for key in options:
            if not _INDUCTOR_KEY.fullmatch(key):
                raise ValueError(
                    f"inductor_options key {shown(key)} is not a torch._inductor.config name: "
                    "use dotted names such as 'triton.cudagraphs'"
                )
        return options

    @model_validator(mode="after")
    def _check_backend_options(self) -> TrainingCompilerConfig:
        if self.backend == "xla":
            inductor_only = {
                "mode": self.mode != "default",
                "fullgraph": self.fullgraph,
                "dynamic": self.dynamic is not None,
                "inductor_options": bool(self.inductor_options),
                "keep_faster": self.keep_faster is not None,
                "regional": self.regional is not None,
                "measure_speedup=False": not self.measure_speedup,
                "aot=False": not self.aot,
                "verify=False": not self.verify,
                "fast_random": self.fast_random,
            }
            bad = [name for name, is_set in inductor_only.items() if is_set]
            if bad:
                verb = "is" if len(bad) == 1 else "are"
                raise ValueError(
                    f"{', '.join(bad)} {verb} only for backend='inductor' (torch.compile), "
                    "but backend='xla' was chosen: drop them or set backend='inductor'"
                )
        if self.keep_faster is True and not self.measure_speedup:
            raise ValueError(
                "keep_faster=True needs the job's own eager-against-compiled measurement, "
                "but measure_speedup=False turns it off: drop one of them"
            )
        if self.backend == "inductor" and self.xla_engine != "auto":
            raise ValueError(
                f"xla_engine={self.xla_engine!r} only applies to backend='xla', but "
                "backend='inductor' was chosen: drop xla_engine or set backend='xla'"
            )
        if self.backend == "inductor" and self.xla_flags:
            raise ValueError(
                "xla_flags only apply to backend='xla', but backend='inductor' was chosen: "
                "drop xla_flags or set backend='xla'"
            )
        return self

    def engine_for(self, *, nvidia_gpu: bool) -> Literal["torch_xla", "jax"]:
        """The engine that runs ``backend='xla'`` on a host with or without NVIDIA GPUs."""
        if self.xla_engine != "auto":
            return self.xla_engine
        return "jax" if nvidia_gpu else "torch_xla"

    def __init__(self, **data: Any) -> None:
        try:
            super().__init__(**data)
        except ValidationError as exc:
            raise CompilerConfigError(_describe(exc)) from None

    # -- codec ---------------------------------------------------------------

    def _to_hyperparameter_dict(self) -> dict[str, Any]:
        """Hyperparameters as Python values, the shape SageMaker v2's Framework expects.

        The SDK json-encodes each value, so ``True`` is stored as ``"true"``, as the
        AWS ``TrainingCompilerConfig`` does.
        """
        body = {VERSION_FIELD: __version__, **self.model_dump(mode="json")}
        for name in _NEWER_FIELDS:
            # Left out at their defaults, so containers older than the field still read the config.
            if body[name] == type(self).model_fields[name].default:
                del body[name]
        return {ENABLED_KEY: self.enabled, DEBUG_KEY: self.debug, CONFIG_KEY: body}

    def to_hyperparameters(self) -> dict[str, str]:
        """Hyperparameters exactly as SageMaker stores them (every value a JSON string)."""
        # Encoded as SageMaker v2's Framework encodes every hyperparameter, so both
        # paths produce the very same strings.
        encoded = {key: json.dumps(value) for key, value in self._to_hyperparameter_dict().items()}
        check_limits(encoded, what="the compiler config")
        return encoded

    @classmethod
    def from_hyperparameters(cls, mapping: Mapping[str, Any]) -> TrainingCompilerConfig:
        """Rebuild a config from a job's hyperparameters or framework parameters.

        Accepts the stored strings and already-decoded values alike. With only the
        two AWS keys (a job from the AWS SDK) the other fields take their defaults;
        with none of the keys the compiler is off. Anything malformed raises
        :class:`CompilerConfigError` naming the hyperparameter or field.
        """
        if not isinstance(mapping, Mapping):
            raise CompilerConfigError(
                f"the job's hyperparameters must be a mapping of name to value, got "
                f"{type(mapping).__name__}: pass estimator.hyperparameters() or the "
                "toolkit's framework parameters"
            )
        enabled = decode_bool(mapping, ENABLED_KEY)
        debug = decode_bool(mapping, DEBUG_KEY)
        body = decode_object(mapping, CONFIG_KEY)
        if body is None:
            if enabled is None and debug is None:
                return cls(enabled=False)
            fields: dict[str, Any] = {}
        else:
            writer = str(body.pop(VERSION_FIELD, "unknown"))[:SHOWN_CHARS]
            unknown = sorted(str(key) for key in set(body) - set(cls.model_fields))
            if unknown:
                raise CompilerConfigError(
                    f"{CONFIG_KEY} has field(s) {', '.join(map(shown, unknown[:5]))} that "
                    f"trcomp {__version__} (in this container) does not know; the config was "
                    f"written by trcomp {writer}. Use a container image built from trcomp "
                    f"{writer} or newer, or drop the field(s) from the config."
                )
            fields = body
        for key, name, value in ((ENABLED_KEY, "enabled", enabled), (DEBUG_KEY, "debug", debug)):
            if value is None:
                continue
            if name in fields and fields[name] != value:
                raise CompilerConfigError(
                    f"{key}={json.dumps(value)} contradicts {name}={shown_json(fields[name])} "
                    f"in {CONFIG_KEY}: remove {key} from the job's hyperparameters and set "
                    f"{name} on the TrainingCompilerConfig instead"
                )
            fields[name] = value
        return cls(**fields)


def _describe(exc: ValidationError) -> str:
    parts = []
    for err in exc.errors():
        where = ".".join(str(p)[:SHOWN_CHARS] for p in err["loc"]) or "config"
        message = err["msg"].removeprefix("Value error, ")
        if err["type"] == "extra_forbidden":
            fields = ", ".join(TrainingCompilerConfig.model_fields)
            message = f"unknown field; TrainingCompilerConfig takes: {fields}"
        elif err["type"] == "literal_error":
            message = f"{message} (got {shown(err['input'])})"
        parts.append(f"{where}: {message}" if err["loc"] else message)
    return "invalid TrainingCompilerConfig: " + "; ".join(parts)
