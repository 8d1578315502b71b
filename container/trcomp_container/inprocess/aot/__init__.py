"""Warm starts from ahead-of-time compiled artifacts (torch's ``aot_compile``, torch >= 2.14).

A job that compiles a module the start-up hook found traces it with dynamo and
compiles it with inductor; with a warm compile cache inductor skips the
kernel builds, but dynamo still traces and AOTAutograd still rebuilds its
graphs. Where torch has ``torch.compile(...).aot_compile`` and
``torch.compiler.load_compiled_function``, the module's ``forward`` is
compiled ahead of time instead, forward and backward, at its first compiled
call, and the artifact is saved in the job's compile cache
(``$TRCOMP_CACHE_DIR/aot/<key>.pt2``, beside ``<key>.json``). The next job of
the lineage, or any job reading the same shared cache, loads it: no tracing,
no compiling.

An artifact is used only when it fits. Its key (:func:`.key.artifact_key`) holds
the versions (torch, Python, trcomp), the machine, the module's structure
(classes, parameter and buffer names, shapes, dtypes, ``requires_grad``,
train/eval flags), the call's input signature (shapes, dtypes, devices,
strides; scalar values, which dynamo specializes on), grad mode, autocast and
the ``torch.compile`` arguments. The ``.json`` beside it lists every source
range dynamo traced (the script's ``forward`` and the torch modules it
inlined) with a digest of its text: an edited ``forward`` makes the artifact
stale. Then torch's own guards (the artifact's ``guard_check``) run before every call;
a call they refuse runs the normal compiled path.

Where ``aot_compile`` does not apply (a graph break: it needs ``fullgraph``;
CUDA graphs; the module's own forward hooks, which ``forward`` does not run;
regional compilation) or anything fails, the module takes the normal
``torch.compile`` path and :class:`.call.AotState` says why. Artifacts live in the
compile cache, so they go through the same trust checks as every other entry
of a shared cache (docs/remote.md): an artifact is pickled code.

Three modules: :mod:`.key` (what an artifact depends on), :mod:`.guards` (its guards,
its scope, tracing fixes) and :mod:`.call` (load, compile, save, call). Standard
library and ``trcomp.contract`` only at import; callers pass ``torch`` in.
"""

from __future__ import annotations

from collections.abc import Callable

from trcomp_container.inprocess.aot.call import AotCall, AotState
from trcomp_container.inprocess.aot.guards import saved_guards, with_guard_filter
from trcomp_container.inprocess.aot.key import (
    artifact_key,
    call_forward,
    has_aot_compile,
    unsupported_reason,
)

__all__ = [
    "AOT_DIR",
    "AotCall",
    "AotState",
    "artifact_key",
    "call_forward",
    "has_aot_compile",
    "keep_scope",
    "saved_guards",
    "unsupported_reason",
    "with_guard_filter",
]

AOT_DIR = "aot"
"""The artifacts' folder inside the job's compile cache (``TRCOMP_CACHE_DIR``)."""


def keep_scope() -> Callable[[], None]:
    """The undo of what dynamo and the loads add to :func:`.key.call_forward`'s globals.

    dynamo's generated code reads modules through globals it adds to the traced
    function's scope (``___module_<name>_<id>_c<n>``), and a load puts them back.
    """
    scope = call_forward.__globals__
    before = set(scope)

    def undo() -> None:
        for name in set(scope) - before:
            del scope[name]

    return undo
