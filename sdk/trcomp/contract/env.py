"""Every ``TRCOMP_*`` environment variable that crosses a process boundary, in one registry.

Each :class:`EnvVar` says who writes the variable, which processes read it,
whether its value is a secret, and how it reaches the training processes
(:attr:`EnvVar.handoff`). Code reads and writes a name through its constant
here, never a string of its own: ``tests/contract/test_env_registry.py`` fails
on a ``TRCOMP_*`` string anywhere else in ``sdk/`` and ``container/``, and on a
``TRCOMP_*`` name (in code, docstrings or shell scripts) the registry lacks.

The training processes (the user's script, its torchrun workers and every
process the start-up hook runs in) never get a copy of the entrypoint's
environment: :func:`for_training` keeps the platform's variables (SageMaker's
``SM_*``, the user's ``environment=``, ``PATH``...) and, of trcomp's, only those
whose handoff is ``"pass"``. The entrypoint then sets the ``"set"`` ones, and in
a job with a Redis shared cache the ``"redis"`` ones, which the start-up hook
takes out of the environment as it starts (docs/remote.md). Secrets reach no
training process otherwise; for ``file://`` and S3 shared caches only the
entrypoint signs and checks, so the team's key never leaves it.

Processes, as :attr:`EnvVar.writer` and :attr:`EnvVar.readers` name them:
``user`` (the person: a shell, the estimator's ``environment=``), ``sdk``
(trcomp's estimators, local modes and CLI), ``entrypoint``
(``trcomp_container.training`` and ``container/entrypoint.sh``), ``hook`` (the
start-up hook in a training process), ``script`` (the user's script and the
``trcomp.runtime`` helpers), ``build`` (the image build scripts), ``bench``
(``trcomp_bench``). Standard library only: the start-up hook imports it.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Literal

__all__ = [
    "BACKEND_ENV",
    "BASE_TAG_ENV",
    "CACHE_DIR_ENV",
    "CHECKPOINT_DIR_ENV",
    "CHECKPOINT_URI_ENV",
    "COMPILER_DIR_ENV",
    "COMPILE_TURNS_ENV",
    "CONFIG_ENV",
    "DEBUG_ENV",
    "GIVE_BACK_INPUTS_ENV",
    "GRACE_ENV",
    "IMAGE_URI_ENV",
    "INDUCTOR_OPTIONS_ENV",
    "KEY_ENV",
    "KEY_SECRET_ENV",
    "LAUNCHER_ENV",
    "LOCAL_IMAGE_ENV",
    "MASTER_PORT_ENV",
    "MAX_READ_BYTES_ENV",
    "METRICS_DIR_ENV",
    "NOT_BEFORE_ENV",
    "NPROC_PER_NODE_ENV",
    "PREFIX",
    "PREVIOUS_KEY_ENV",
    "PREVIOUS_KEY_SECRET_ENV",
    "PROCESS_PYTHON_PREFIX",
    "REDIS_CACHES_ENV",
    "REDIS_CA_ENV",
    "REDIS_PASSWORD_ENV",
    "REDIS_PASSWORD_SECRET_ENV",
    "REDIS_URL_ENV",
    "REGISTRY",
    "ROLE_ENV",
    "SECRET_NAMES",
    "TORCH_REMOTE_CACHE_ENV",
    "XLA_ENGINE_ENV",
    "EnvVar",
    "Handoff",
    "for_training",
    "lookup",
    "names",
    "without_secrets",
]

PREFIX = "TRCOMP_"
"""trcomp's variables all start with this; :func:`for_training` drops every one it does not
allow-list, a near name of a secret included."""

Handoff = Literal["no", "pass", "set", "redis"]
"""How a variable reaches the training processes: ``no`` never; ``pass`` the value the
entrypoint was given, passed on; ``set`` the entrypoint's own value (a given one is dropped);
``redis`` set by the entrypoint in a Redis shared-cache job only, and taken out of the
environment by the start-up hook as it starts (the hook keeps it in memory)."""


@dataclass(frozen=True)
class EnvVar:
    """One variable: its name, writer, readers, whether it is a secret, how it reaches the
    training processes, and what it holds. ``prefix``: a family of names (``NAME<suffix>``)."""

    name: str
    writer: str
    readers: tuple[str, ...]
    secret: bool
    handoff: Handoff
    doc: str
    prefix: bool = False


# -- SDK -> container: the job's configuration ------------------------------------------------

CONFIG_ENV = "TRCOMP_CONFIG"
INDUCTOR_OPTIONS_ENV = "TRCOMP_INDUCTOR_OPTIONS"
BACKEND_ENV = "TRCOMP_BACKEND"
DEBUG_ENV = "TRCOMP_DEBUG"
XLA_ENGINE_ENV = "TRCOMP_XLA_ENGINE"
METRICS_DIR_ENV = "TRCOMP_METRICS_DIR"
CACHE_DIR_ENV = "TRCOMP_CACHE_DIR"
COMPILER_DIR_ENV = "TRCOMP_COMPILER_DIR"
LAUNCHER_ENV = "TRCOMP_LAUNCHER"
CHECKPOINT_DIR_ENV = "TRCOMP_CHECKPOINT_DIR"
CHECKPOINT_URI_ENV = "TRCOMP_CHECKPOINT_URI"
GIVE_BACK_INPUTS_ENV = "TRCOMP_GIVE_BACK_INPUTS"
GRACE_ENV = "TRCOMP_SIGTERM_GRACE_S"
NPROC_PER_NODE_ENV = "TRCOMP_NPROC_PER_NODE"
MASTER_PORT_ENV = "TRCOMP_MASTER_PORT"
COMPILE_TURNS_ENV = "TRCOMP_COMPILE_TURNS"
# -- the shared cache's secrets and settings (the job's environment, never its hyperparameters)
KEY_ENV = "TRCOMP_SHARED_CACHE_KEY"
KEY_SECRET_ENV = "TRCOMP_SHARED_CACHE_KEY_SECRET"
PREVIOUS_KEY_ENV = "TRCOMP_SHARED_CACHE_KEY_PREVIOUS"
PREVIOUS_KEY_SECRET_ENV = "TRCOMP_SHARED_CACHE_KEY_PREVIOUS_SECRET"
REDIS_PASSWORD_ENV = "TRCOMP_REDIS_PASSWORD"
REDIS_PASSWORD_SECRET_ENV = "TRCOMP_REDIS_PASSWORD_SECRET"
REDIS_CA_ENV = "TRCOMP_REDIS_CA_CERTS"
MAX_READ_BYTES_ENV = "TRCOMP_SHARED_CACHE_MAX_READ_BYTES"
NOT_BEFORE_ENV = "TRCOMP_SHARED_CACHE_NOT_BEFORE"
REDIS_URL_ENV = "TRCOMP_REDIS_URL"
REDIS_CACHES_ENV = "TRCOMP_REDIS_CACHES"
# -- the SDK's own settings, from the user's shell --------------------------------------------
IMAGE_URI_ENV = "TRCOMP_IMAGE_URI"
LOCAL_IMAGE_ENV = "TRCOMP_LOCAL_IMAGE"
ROLE_ENV = "TRCOMP_ROLE"
PROCESS_PYTHON_PREFIX = "TRCOMP_PROCESS_PYTHON_"
BASE_TAG_ENV = "TRCOMP_BASE_TAG"

_TRAINING = ("hook", "script")

REGISTRY: tuple[EnvVar, ...] = (
    EnvVar(CONFIG_ENV, "entrypoint", _TRAINING, False, "set",
           "The resolved config (trcomp.contract.runtime_config), read by trcomp.runtime "
           "and the start-up hook."),
    EnvVar(INDUCTOR_OPTIONS_ENV, "entrypoint", ("script",), False, "set",
           "The config's inductor_options as JSON, for scripts (the hook reads the config)."),
    EnvVar(BACKEND_ENV, "entrypoint", ("script",), False, "set",
           "The backend in one word (inductor, xla, eager), for scripts."),
    EnvVar(DEBUG_ENV, "entrypoint", ("script",), False, "set", "1 with debug=True, else 0."),
    EnvVar(XLA_ENGINE_ENV, "entrypoint", ("script",), False, "set",
           "jax when backend='xla' runs on the jax engine."),
    EnvVar(METRICS_DIR_ENV, "entrypoint", ("hook",), False, "set",
           "Where each rank writes its record; the start-up hook runs only where it is set."),
    EnvVar(CACHE_DIR_ENV, "entrypoint", ("hook",), False, "set",
           "The job's live compile cache (the hook keeps its speed-up decision there)."),
    EnvVar(COMPILER_DIR_ENV, "entrypoint", ("hook",), False, "set",
           "output/data/compiler, where debug reports go (debug=True)."),
    EnvVar(LAUNCHER_ENV, "entrypoint", ("hook",), False, "set",
           "torchrun or direct: under torchrun the hook of the agent (no LOCAL_RANK) leaves the "
           "Redis handoff in the environment for the workers it starts."),
    EnvVar(CHECKPOINT_DIR_ENV, "sdk", ("entrypoint",), False, "no",
           "checkpoint_local_path, the checkpoint directory inside the container."),
    EnvVar(CHECKPOINT_URI_ENV, "sdk", ("entrypoint", "script"), False, "pass",
           "A local job's checkpoint location as a file:// URI (named in summary.json; the "
           "script reads it as before, docs/environment.md)."),
    EnvVar(GIVE_BACK_INPUTS_ENV, "sdk", ("entrypoint",), False, "no",
           "Docker local mode: entrypoint.sh gives the inputs back to the host's user."),
    EnvVar(GRACE_ENV, "user", ("entrypoint", "sdk"), False, "no",
           "Seconds between SIGTERM and SIGKILL for the script (default 100)."),
    EnvVar(NPROC_PER_NODE_ENV, "user", ("entrypoint",), False, "no",
           "Processes per host on CPU under torchrun (SDK v3 sets it from the trainer)."),
    EnvVar(MASTER_PORT_ENV, "user", ("entrypoint",), False, "no",
           "torchrun's rendezvous port on multi-host jobs (default 29500)."),
    EnvVar(COMPILE_TURNS_ENV, "user", ("hook",), False, "pass",
           "0: every rank of a host compiles at once (no compile turns)."),
    EnvVar(KEY_ENV, "user", ("entrypoint", "hook"), True, "redis",
           "The team's key: entries are signed with it, only entries signed with it are read. "
           "The hook holds it only in a Redis job, where it signs inductor's values."),
    EnvVar(KEY_SECRET_ENV, "user", ("entrypoint", "sdk"), False, "no",
           "A Secrets Manager secret (ARN or name) holding the key."),
    EnvVar(PREVIOUS_KEY_ENV, "user", ("entrypoint", "hook"), True, "redis",
           "The team's previous key while it rotates keys (read, never signed with)."),
    EnvVar(PREVIOUS_KEY_SECRET_ENV, "user", ("entrypoint", "sdk"), False, "no",
           "A Secrets Manager secret holding the previous key."),
    EnvVar(REDIS_PASSWORD_ENV, "user", ("entrypoint", "hook"), True, "redis",
           "The Redis password (AUTH) of a redis:// or rediss:// shared cache."),
    EnvVar(REDIS_PASSWORD_SECRET_ENV, "user", ("entrypoint", "sdk"), False, "no",
           "A Secrets Manager secret holding the Redis password."),
    EnvVar(REDIS_CA_ENV, "user", ("entrypoint",), False, "no",
           "A CA bundle a rediss:// server's certificate is checked with."),
    EnvVar(NOT_BEFORE_ENV, "user", ("entrypoint", "hook"), False, "redis",
           "Entries and Redis values signed before this time (ISO-8601, UTC) are withdrawn: "
           "never read (trcomp.contract.withdrawal). The hook holds it only in a Redis job."),
    EnvVar(MAX_READ_BYTES_ENV, "user", ("entrypoint",), False, "no",
           "At most this many unpacked bytes of shared-cache entries are read at start."),
    EnvVar(REDIS_URL_ENV, "entrypoint", ("hook",), False, "redis",
           "The Redis URL inductor's remote caches use (no password in it), for the hook."),
    EnvVar(REDIS_CACHES_ENV, "entrypoint", ("hook",), False, "redis",
           "Which of inductor's remote caches the hook turns on (comma-separated)."),
    EnvVar(IMAGE_URI_ENV, "user", ("sdk",), False, "no", "The image every job uses."),
    EnvVar(LOCAL_IMAGE_ENV, "user", ("sdk",), False, "no", "The image of local Docker jobs."),
    EnvVar(ROLE_ENV, "user", ("sdk",), False, "no", "The CLI's default execution role ARN."),
    EnvVar(PROCESS_PYTHON_PREFIX, "user", ("sdk", "bench"), False, "no",
           "TRCOMP_PROCESS_PYTHON_<MAJOR>_<MINOR>: the interpreter of process-mode jobs of "
           "that torch.", prefix=True),
    EnvVar(BASE_TAG_ENV, "user", ("build",), False, "no",
           "The offline base image's tag (container/build_base.sh)."),
)  # fmt: skip

SECRET_NAMES = frozenset(v.name for v in REGISTRY if v.secret)
"""Names whose values are secrets: never logged, never in a training process but the hook's
handoff of a Redis job."""

TORCH_REMOTE_CACHE_ENV = (
    "TORCHINDUCTOR_FX_GRAPH_REMOTE_CACHE",
    "TORCHINDUCTOR_AUTOGRAD_REMOTE_CACHE",
    "TORCHINDUCTOR_AUTOTUNE_REMOTE_CACHE",
    "TORCHINDUCTOR_BUNDLED_AUTOTUNE_REMOTE_CACHE",
    "TORCH_DYNAMO_AUTOMATIC_DYNAMIC_REMOTE_PGO",
    "TORCHINDUCTOR_REDIS_URL",
    "TORCHINDUCTOR_REDIS_HOST",
    "TORCHINDUCTOR_REDIS_PORT",
)
"""torch's (2.9) variables that turn its remote caches on or point them at a Redis. Read by
torch in any process, with or without the hook, so a job with a shared cache never hands
them on (:func:`for_training`): there only the hook's session turns the caches on, and signs."""

_BY_NAME = {v.name: v for v in REGISTRY if not v.prefix}
_PREFIXES = tuple(v for v in REGISTRY if v.prefix)


def lookup(name: str) -> EnvVar | None:
    """The registry's entry for ``name`` (a prefix family's too); None when unregistered."""
    found = _BY_NAME.get(name)
    if found is not None:
        return found
    return next((v for v in _PREFIXES if name.startswith(v.name)), None)


def for_training(
    environ: Mapping[str, str], *, drop_torch_remote_cache: bool
) -> tuple[dict[str, str], list[str]]:
    """The part of ``environ`` the training processes may get, and the names dropped from it
    that the user should hear about.

    Kept: every variable not trcomp's, and trcomp's whose handoff is ``pass``. Dropped:
    every other ``TRCOMP_*`` name (secrets, their near names, and what the entrypoint sets
    itself) and, with ``drop_torch_remote_cache`` (a job with a shared cache or a key),
    torch's remote-cache variables (:data:`TORCH_REMOTE_CACHE_ENV`), which would let a
    process without the hook read unsigned values. The dropped names listed are torch's
    and unregistered ``TRCOMP_*`` ones (a typo of a registered name, say).
    """
    kept: dict[str, str] = {}
    noted: list[str] = []
    for name, value in environ.items():
        if name.startswith(PREFIX):
            entry = lookup(name)
            if entry is not None and entry.handoff == "pass":
                kept[name] = value
            elif entry is None:
                noted.append(name)
        elif drop_torch_remote_cache and name in TORCH_REMOTE_CACHE_ENV:
            noted.append(name)
        else:
            kept[name] = value
    return kept, sorted(noted)


def without_secrets(environ: Mapping[str, str]) -> dict[str, str]:
    """``environ`` without a secret's name, nor the Redis handoff (a child of the entrypoint
    that runs no training, such as the start-up check)."""
    redis = {v.name for v in REGISTRY if v.handoff == "redis"}
    return {k: v for k, v in environ.items() if k not in SECRET_NAMES and k not in redis}


def names(entries: Iterable[EnvVar] = REGISTRY) -> list[str]:
    """The registered names (prefixes with their trailing underscore), sorted."""
    return sorted(v.name for v in entries)
