"""One module the zero-code path compiled: what it is and how its calls ran.

Standard library only at import.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from trcomp.runtime.regions import RegionalCall
from trcomp_container.inprocess.aot import AotCall
from trcomp_container.inprocess.verify import Verdict

__all__ = [
    "CODE_NAME",
    "REASON_CHARS",
    "CompiledModule",
    "LimitLog",
    "trained",
    "went_through_compiled",
]

REASON_CHARS = 500
CODE_NAME = "trcomp_compiled_{}"
"""The code name of each compiled module's traced function (dynamo counts limits per code)."""
_LIMIT_LOG = re.compile(
    r"hit config\.(\w+) \((\d+)\).*?function: '([^']+)' \(([^)]*)\).*?last reason: (.*?)\n",
    re.S,
)
LIMIT_LOGGER = "torch._dynamo.convert_frame"
"""The logger whose "hit config.recompile_limit" warnings name the frame that hit it."""


@dataclass
class CompiledModule:
    """One module the hook compiled (or tried to), and how its calls ran."""

    name: str
    parameters: int
    by: str = "trcomp"
    """Who compiled it: the hook (``trcomp``) or the script through ``trcomp.runtime.compile``."""
    failed: str | None = None
    call: RegionalCall | None = None
    calls: int = 0
    """Calls through the compiled code (not counting calls made eager on purpose)."""
    eager_calls: int = 0
    """Of those, calls dynamo ran as plain Python (recompile limit hit, frame skipped)."""
    last_call_eager: bool = False
    limit: str | None = None
    """Dynamo's limit this module hit (``recompile_limit (8): <last reason>``)."""
    recompiled: str | None = None
    """Why the hook compiled the module afresh, if it did."""
    graphs_seen: int | None = None
    """Of its first compiled calls with an autograd graph, how many went through compiled
    code (:func:`went_through_compiled`); None: none looked at yet."""
    aot: AotCall | None = None
    """Its ahead-of-time artifact (torch >= 2.14, compile cache on), when it may have one."""
    aot_off: str | None = None
    """Why it has none, when the job keeps artifacts."""
    checking: bool = False
    """Its calls are being verified against eager (:mod:`.verify`) until the step ends."""
    verdicts: list[Verdict] = field(default_factory=list)
    """What each verified call found (this round)."""
    check_started: int | None = None
    """The step (count of optimizer steps before it) of the round's first checked call."""
    verified_calls: int = 0
    """Graph checks run for it (each graph checked at its first call in the module)."""
    checked_calls: int = 0
    """Its calls in the current check round (the round ends after
    :data:`.calls.MAX_CHECKED_CALLS` of them in a loop that steps no optimizer)."""
    verify_s: float = 0.0
    """Seconds the checks took, without the compiles that ran inside them."""
    verify_compile_s: float = 0.0
    """Seconds of compiling inside the checks (backward graphs compiled at the check's
    backward: the compile the script's first backward would otherwise have paid)."""
    unchecked_reason: str | None = None
    """Why a graph of it ran unchecked, when one did (a graph that runs collectives)."""
    double_backwards: int = 0
    """Backwards with ``create_graph=True`` through its compiled graphs, recomputed eagerly."""
    verified: bool | None = None
    """True: compiled matched eager; False: it did not (``failed`` says how); None: not yet."""
    rechecks: int = 0
    """New graphs checked after its first check (a new input shape, mode or grad mode)."""
    unchecked_graphs: int = 0
    """New graphs after its first check that ran unchecked (a job of several ranks)."""
    block_of: str | None = None
    """The model it is a block of, when compiled block by block (FSDP2: :mod:`.fsdp`)."""
    eager: Callable[..., Any] | None = field(default=None, repr=False)
    """What runs the module eager: its ``_call_impl`` (None), or, for a block compiled
    inside FSDP2's hooks, its own ``forward`` (the hooks run around it either way)."""

    def run_eager(self, module: Any, *args: Any, **kwargs: Any) -> Any:
        """Run ``module``'s call eager (:attr:`eager`)."""
        if self.eager is not None:
            return self.eager(*args, **kwargs)
        return module._call_impl(*args, **kwargs)

    @property
    def ran_aot(self) -> bool:
        """Whether an ahead-of-time artifact ran some of its calls."""
        return self.aot is not None and self.aot.state.calls > 0

    @property
    def regional(self) -> str | None:
        """The repeated blocks compiled once for all layers, e.g. ``"12 x GPT2Block"``."""
        return None if self.call is None else self.call.describe()

    @property
    def ran_compiled(self) -> bool:
        """Whether the module's last call ran compiled code."""
        return (
            self.failed is None
            and self.calls > 0
            and not self.last_call_eager
            and self.graphs_seen != 0
        )

    def as_dict(self) -> dict[str, Any]:
        return {
            "module": self.name,
            "parameters": self.parameters,
            "by": self.by,
            "failed": self.failed,
            "regional": self.regional,
            "regional_off": None if self.call is None else self.call.unmarked,
            "calls": self.calls,
            "eager_calls": self.eager_calls,
            "ran_compiled": self.ran_compiled,
            "limit": self.limit,
            "recompiled": self.recompiled,
            "graphs_seen": self.graphs_seen,
            "verified": self.verified,
            "verified_calls": self.verified_calls,
            "verify_s": round(self.verify_s, 4),
            "verify_compile_s": round(self.verify_compile_s, 4),
            "unchecked_reason": self.unchecked_reason,
            "double_backwards": self.double_backwards,
            "rechecks": self.rechecks,
            "unchecked_graphs": self.unchecked_graphs,
            "block_of": self.block_of,
            "aot": self.aot.state.as_dict()
            if self.aot is not None
            else (None if self.aot_off is None else {"path": "off", "reason": self.aot_off}),
        }

    # -- its one state (issue 41): derived from the fields above ------------------------

    @property
    def state(self) -> ModuleState:
        """What the module's calls run now (:class:`.state.ModuleState`); the speed-up
        windows, the keep-faster decision and the record read it."""
        from trcomp_container.inprocess.state import module_state

        return module_state(self.facts)

    @property
    def state_at_end(self) -> ModuleState:
        """Its state as the record keeps it at the job's end: a later check the job's end
        cut off keeps the verdict of the check the module passed before."""
        from trcomp_container.inprocess.state import module_state

        return module_state(self.facts, job_ended=True)

    @property
    def facts(self) -> ModuleFacts:
        """The fields its state is derived from."""
        from trcomp_container.inprocess.state import ModuleFacts

        return ModuleFacts(
            failed=self.failed,
            checking=self.checking,
            verified=self.verified,
            calls=self.calls,
            last_call_eager=self.last_call_eager,
            graphs_seen=self.graphs_seen,
            ran_aot=self.ran_aot,
            unchecked_graphs=self.unchecked_graphs,
            rechecks=self.rechecks,
            recompiled=self.recompiled,
        )


class LimitLog(logging.Filter):
    """Reads dynamo's "hit config.recompile_limit" warnings, for any frame.

    ``on_limit(code_name, limit, last_reason, where)`` is called for each (``where``:
    the frame's ``file:line``).
    """

    def __init__(self, on_limit: Callable[[str, str, str, str], None]) -> None:
        super().__init__()
        self.on_limit = on_limit

    def filter(self, record: logging.LogRecord) -> bool:
        try:
            match = _LIMIT_LOG.search(record.getMessage() + "\n")
            if match:
                self.on_limit(
                    match.group(3),
                    f"{match.group(1)} ({match.group(2)})",
                    match.group(5).strip(),
                    match.group(4),
                )
        except Exception:  # a log line must never break the job, whatever it holds
            pass
        return True


def went_through_compiled(output: Any, node_name: str, most: int = 20000) -> bool | None:
    """Whether the autograd graph of ``output`` (a tensor) holds a compiled region's node.

    None: it has no graph (no gradient, or more than ``most`` nodes looked at without one).
    A module whose compiled graphs hold none of its computation (dynamo broke the graph
    before any of it, and compiled only what the script's hooks do) has none.
    """
    root = getattr(output, "grad_fn", None)
    stack: list[Any] = [root]
    seen: set[int] = set()
    kept: list[Any] = []
    while stack and root is not None and len(seen) < most:
        node = stack.pop()
        if node is None or id(node) in seen:
            continue
        seen.add(id(node))
        kept.append(node)  # each access makes a new Python object: keep ids from being reused
        if node_name in type(node).__name__:
            return True
        stack.extend(next_node for next_node, _ in node.next_functions)
    return False if root is not None and not stack else None


def trained(module: Any) -> tuple[bool, ...]:
    """Which of the module's parameters require gradients (compared at each call)."""
    return tuple(param.requires_grad for param in module.parameters())


if TYPE_CHECKING:
    from trcomp_container.inprocess.state import ModuleFacts, ModuleState
