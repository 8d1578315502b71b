"""The one state of each trained module: what its calls run, and what the summary may say.

The speed-up windows, the keep-faster decision, the per-rank record and the
summary read this state, never "was a graph compiled": a speed-up and "kept
compiled" are reported only for a module whose compiled code ran.

Standard library only at import (the summary reads it outside the training process).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from enum import Enum
from typing import Protocol

__all__ = [
    "ModuleFacts",
    "ModuleState",
    "Stateful",
    "all_eager_by_verdict",
    "module_state",
    "ran_compiled",
]


class ModuleState(str, Enum):
    """What a trained module's calls run (the record's ``state``, its value)."""

    EAGER = "eager"
    """Not compiled, or compiled but never called through its compiled code yet."""
    CHECKING = "checking"
    """Its calls are being checked against eager (:mod:`.verify`)."""
    COMPILED_VERIFIED = "compiled_verified"
    """Runs compiled; its check matched eager."""
    COMPILED_UNCHECKED = "compiled_unchecked"
    """Runs compiled without a check: by choice (``verify=False``), or a later graph
    that ran unchecked (a job of several ranks)."""
    EAGER_BY_VERDICT = "eager_by_verdict"
    """Runs eager because something decided so: its check failed, its compile failed,
    dynamo hit a limit or skipped its frame, or its graphs hold none of its computation."""

    @property
    def runs_compiled(self) -> bool:
        """Whether the module's calls run compiled code in this state."""
        return self in (ModuleState.COMPILED_VERIFIED, ModuleState.COMPILED_UNCHECKED)


@dataclass(frozen=True)
class ModuleFacts:
    """What the state is derived from (a :class:`.compiled.CompiledModule`'s fields, or its
    record's), so the training process and the summary derive it the same way."""

    failed: str | None = None
    checking: bool = False
    verified: bool | None = None
    calls: int = 0
    last_call_eager: bool = False
    graphs_seen: int | None = None
    ran_aot: bool = False
    unchecked_graphs: int = 0
    rechecks: int = 0
    recompiled: str | None = None


def module_state(facts: ModuleFacts, *, job_ended: bool = False) -> ModuleState:
    """The module's state from its facts.

    ``job_ended``: the state the record keeps at the job's end, where a check that the
    job's end cut off keeps the module's earlier verdict (a later graph, a smaller last
    batch, was being checked after the module's first check had passed: it ran compiled
    and verified until then); a first check cut off leaves it eager (not decided).
    """
    if facts.failed is not None or facts.verified is False:
        return ModuleState.EAGER_BY_VERDICT
    if facts.graphs_seen == 0 or (facts.calls > 0 and facts.last_call_eager):
        return ModuleState.EAGER_BY_VERDICT
    if facts.checking:
        if job_ended and _checked_before(facts):
            return ModuleState.COMPILED_VERIFIED
        return ModuleState.CHECKING
    if facts.calls == 0 and not facts.ran_aot:
        return ModuleState.EAGER
    if facts.verified is True and not facts.unchecked_graphs:
        return ModuleState.COMPILED_VERIFIED
    return ModuleState.COMPILED_UNCHECKED


def _checked_before(facts: ModuleFacts) -> bool:
    """Whether an open check is a later one, after a first check the module passed.

    A module whose check failed runs eager and is never checked again, so a later check
    (``rechecks``, or a fresh compile after its parameters' ``requires_grad`` changed)
    that is still open follows a pass, as long as compiled calls ran in between.
    """
    if facts.verified is True:  # a check that keeps the earlier verdict while it runs
        return True
    return (facts.rechecks > 0 or facts.recompiled is not None) and facts.calls > 0


class Stateful(Protocol):
    """What the speed-up windows read of a module (a :class:`.compiled.CompiledModule`)."""

    name: str
    calls: int
    failed: str | None
    limit: str | None

    @property
    def state(self) -> ModuleState: ...


def ran_compiled(
    entries: Sequence[Stateful], calls_before: Mapping[int, int], *, script_compiled: bool
) -> bool:
    """Whether a step ran compiled code and checked no module: one module in a compiled
    state made compiled calls since ``calls_before`` (``id(entry)`` -> its calls then), and
    none was being checked (a checked call runs the module more than once). A module its
    check kept eager runs eager, whatever graphs were compiled for it. ``script_compiled``:
    the script compiled a model itself (its calls are not seen): it counts as compiled."""
    if any(entry.state is ModuleState.CHECKING for entry in entries):
        return False
    return script_compiled or any(
        entry.state.runs_compiled and entry.calls > calls_before.get(id(entry), 0)
        for entry in entries
    )


def all_eager_by_verdict(entries: Sequence[Stateful]) -> str | None:
    """Why there is nothing to measure: every module runs eager by a verdict (its check
    failed, its compile failed, a limit); None otherwise (or with no module)."""
    if not entries or any(entry.state is not ModuleState.EAGER_BY_VERDICT for entry in entries):
        return None
    why = "; ".join(
        f"{entry.name}: {entry.failed or entry.limit or 'its graphs hold none of its work'}"
        for entry in entries
    )
    return f"no compiled code ran: every compiled module runs eager ({why})"[:500]
