"""The per-process record the start-up hook writes at exit, and the one reader of it.

Every training process of a job that stepped, compiled or failed writes
``rank<RANK>-pid<PID>.json`` into ``TRCOMP_METRICS_DIR``; the entrypoint's
``summary.py`` and ``switch_report.py`` read them back into ``summary.json``.
:class:`RankRecord` is that file: :meth:`RankRecord.to_json` is what the hook
writes, :meth:`RankRecord.from_json` the only reader. Field names are the JSON
keys. The reader is tolerant: a part a process never reached (an eager run has
no ``autocompile``, ``speedup`` or ``compile``) or that an older trcomp did not
write reads as None or its default.

Standard library only: the hook imports this inside the user's process, before
the script imports torch.
"""

from __future__ import annotations

import contextlib
import json
from collections.abc import Mapping
from dataclasses import dataclass, field, fields, replace
from pathlib import Path
from typing import Any, TypeVar, cast

from trcomp_container.inprocess.state import ModuleFacts, ModuleState, module_state

__all__ = [
    "RECORD_GLOB",
    "AutoCompileReport",
    "CompileAot",
    "CompileCache",
    "CompileReport",
    "ErrorReport",
    "ModuleAot",
    "ModuleReport",
    "RankRecord",
    "SpeedupDecision",
    "SpeedupReport",
    "XlaReport",
    "read",
]

RECORD_GLOB = "rank*-pid*.json"
"""The names of the records in a metrics directory (``rank<N>-pid<P>.json``)."""

_F = TypeVar("_F", bound="_Flat")


def _part(body: Mapping[str, Any], key: str) -> Mapping[str, Any] | None:
    """``body[key]`` as a JSON object; None when absent or null."""
    value = body.get(key)
    if value is None:
        return None
    if not isinstance(value, Mapping):
        raise ValueError(f"rank record: {key!r} is a {type(value).__name__}, not a JSON object")
    return value


def _copy(value: Any) -> Any:
    """``value`` as JSON: a part's ``to_json()``, lists and objects copied (never shared)."""
    if isinstance(value, _Flat):
        return value.to_json()
    if isinstance(value, list):
        return [_copy(item) for item in value]
    return dict(value) if isinstance(value, Mapping) else value


class _Flat:
    """A part whose JSON keys are its fields, in order, each a plain JSON value."""

    def to_json(self) -> dict[str, Any]:
        """The part as the hook writes it."""
        return {item.name: _copy(getattr(self, item.name)) for item in fields(cast(Any, self))}

    @classmethod
    def from_json(cls: type[_F], body: Mapping[str, Any]) -> _F:
        """The part from its JSON; a key it lacks reads as the field's default."""
        names = {item.name for item in fields(cast(Any, cls))}
        values = {key: _copy(value) for key, value in body.items() if key in names}
        return cast(_F, cast(Any, cls)(**values))


@dataclass(frozen=True)
class ErrorReport(_Flat):
    """The uncaught exception that ended the script (or the hook's refusal to run it)."""

    type: str = ""
    """The exception's class name, e.g. ``RuntimeError``."""
    message: str = ""
    traceback_tail: str = ""
    """The traceback's last lines (30)."""


@dataclass(frozen=True)
class CompileCache(_Flat):
    """Inductor's and AOTAutograd's cache counters (written only once dynamo was imported)."""

    fxgraph_hit: int = 0
    fxgraph_miss: int = 0
    aotautograd_hit: int = 0
    aotautograd_miss: int = 0
    redis_values_refused: int | None = None
    """Values read from a Redis shared cache that no key of the job signed under their name
    (each a miss, :mod:`.patches.redis_backend`); None (key left out) without a Redis
    shared cache."""
    redis_values_withdrawn: int | None = None
    """Of those, values signed before the team's ``not_before`` (withdrawn); None (key left
    out) without a Redis shared cache."""

    def to_json(self) -> dict[str, Any]:
        body = super().to_json()
        for name in ("redis_values_refused", "redis_values_withdrawn"):
            if body.get(name) is None:
                body.pop(name, None)
        return body


@dataclass(frozen=True)
class CompileAot(_Flat):
    """The process's ahead-of-time artifacts, all modules together (dynamo counts none)."""

    events: int = 0
    """Artifacts compiled or loaded."""
    seconds: float = 0.0
    loaded: int = 0
    saved: int = 0
    discarded_graphs: int = 0
    """Graphs dynamo counted for attempts that failed: none of them runs."""


@dataclass(frozen=True)
class CompileReport:
    """Dynamo's and inductor's counters, with the compile time the callbacks measured."""

    time_s: float = 0.0
    events: int = 0
    """Compilations (dynamo's callbacks, plus ahead-of-time artifacts compiled or loaded)."""
    recompiles: int = 0
    graphs: int = 0
    """Graphs that run compiled: dynamo's unique graphs, plus loaded artifacts."""
    graph_breaks: int = 0
    graph_break_reasons: dict[str, int] = field(default_factory=dict)
    """Reason -> count, the 20 most frequent."""
    cache: CompileCache | None = None
    """None (key left out): dynamo was never imported."""
    aot: CompileAot | None = None
    turns: dict[str, Any] | None = None
    """The ranks of a host taking turns at compiling (:mod:`.turns`); None: one rank."""

    def to_json(self) -> dict[str, Any]:
        body: dict[str, Any] = {
            "time_s": self.time_s,
            "events": self.events,
            "recompiles": self.recompiles,
            "graphs": self.graphs,
            "graph_breaks": self.graph_breaks,
            "graph_break_reasons": dict(self.graph_break_reasons),
        }
        if self.cache is not None:
            body["cache"] = self.cache.to_json()
        body["aot"] = None if self.aot is None else self.aot.to_json()
        if self.turns is not None:
            body["turns"] = dict(self.turns)
        return body

    @classmethod
    def from_json(cls, body: Mapping[str, Any]) -> CompileReport:
        cache, aot, turns = _part(body, "cache"), _part(body, "aot"), _part(body, "turns")
        return cls(
            time_s=body.get("time_s", 0.0),
            events=body.get("events", 0),
            recompiles=body.get("recompiles", 0),
            graphs=body.get("graphs", 0),
            graph_breaks=body.get("graph_breaks", 0),
            graph_break_reasons=dict(body.get("graph_break_reasons") or {}),
            cache=None if cache is None else CompileCache.from_json(cache),
            aot=None if aot is None else CompileAot.from_json(aot),
            turns=None if turns is None else dict(turns),
        )


@dataclass(frozen=True)
class ModuleAot(_Flat):
    """One module's ahead-of-time artifact.

    Two forms: the artifact's state (every field set), or only ``path="off"``
    with the ``reason`` the module has none (the details left None).
    """

    path: str = "off"
    """``loaded``, ``saved``, ``compiled`` or ``off`` (the normal torch.compile path)."""
    reason: str | None = None
    key: str | None = None
    seconds: float | None = None
    calls: int | None = None
    other_calls: int | None = None
    """Calls the artifact's guards refused, run by the normal compiled path."""
    stale: list[str] | None = None
    discarded_graphs: int | None = None

    @property
    def has_details(self) -> bool:
        """Whether this is the artifact's state (not only why there is none)."""
        details = (self.seconds, self.calls, self.other_calls, self.stale, self.discarded_graphs)
        return any(value is not None for value in details)

    def to_json(self) -> dict[str, Any]:
        if not self.has_details:
            return {"path": self.path, "reason": self.reason}
        return super().to_json()


@dataclass(frozen=True)
class ModuleReport(_Flat):
    """One module the zero-code hook compiled (or tried to), and how its calls ran."""

    module: str = ""
    """The module's class name (``DDP(Net)`` for a module DDP wraps)."""
    parameters: int = 0
    by: str = "trcomp"
    """``trcomp`` (the hook compiled it) or ``trcomp.runtime.compile`` (the script did)."""
    failed: str | None = None
    """Why compiling it failed (it ran eager from then on)."""
    regional: str | None = None
    """The repeated blocks compiled once for all layers, e.g. ``"12 x GPT2Block"``."""
    regional_off: str | None = None
    """Why regional compilation was not used for it."""
    calls: int = 0
    eager_calls: int = 0
    """Calls dynamo ran as plain Python (recompile limit hit, frame skipped)."""
    ran_compiled: bool = False
    """Whether its last call ran compiled code."""
    limit: str | None = None
    """Dynamo's limit it hit, with the last recompile reason."""
    recompiled: str | None = None
    """Why the hook compiled it afresh, if it did."""
    graphs_seen: int | None = None
    """Of its first compiled calls, how many had compiled code in their autograd graph."""
    verified: bool | None = None
    """Checked against eager: True matched, False did not (``failed`` says how), None not yet."""
    verified_calls: int = 0
    """Graphs checked (each captured graph at its first call in the module, run eager and
    compiled on copies of its inputs; a record of a trcomp before issue 41: calls run
    both ways)."""
    verify_s: float = 0.0
    """Seconds the check itself took (its compile apart: ``verify_compile_s``; a record of
    a trcomp before issue 41 counted the module's first compile in it)."""
    verify_compile_s: float = 0.0
    """Seconds of compiling spent inside the check (backward graphs compiled at the
    check's backward, which the script's first backward would otherwise have paid)."""
    unchecked_reason: str | None = None
    """Why a graph of it ran unchecked, when one did (a graph that runs collectives)."""
    double_backwards: int = 0
    """Backwards with ``create_graph=True`` through its compiled graphs: each recomputed
    the graph eagerly (the step got eager's gradients); it runs eager after the first."""
    rechecks: int = 0
    """New graphs checked after its first check (a new input shape, mode or grad mode)."""
    unchecked_graphs: int = 0
    """New graphs after its first check that ran unchecked (a job of several ranks)."""
    block_of: str | None = None
    """The model it is a block of, when compiled block by block (FSDP2 blocks)."""
    aot: ModuleAot | None = None
    state: str | None = None
    """Its state at the job's end (:class:`.state.ModuleState`'s value): ``eager``,
    ``checking``, ``compiled_verified``, ``compiled_unchecked`` or ``eager_by_verdict``;
    None in a record of a trcomp before issue 41 (:attr:`module_state` derives it)."""

    @property
    def module_state(self) -> ModuleState:
        """Its state at the job's end: the record's, or derived from its fields."""
        if self.state is not None:
            with contextlib.suppress(ValueError):
                return ModuleState(self.state)
        facts = ModuleFacts(
            failed=self.failed,
            checking=False,
            verified=self.verified,
            calls=self.calls,
            last_call_eager=not self.ran_compiled,
            graphs_seen=self.graphs_seen,
            ran_aot=self.aot is not None and self.aot.path == "loaded",
            unchecked_graphs=self.unchecked_graphs,
            rechecks=self.rechecks,
            recompiled=self.recompiled,
        )
        return module_state(facts, job_ended=True)

    @classmethod
    def from_json(cls, body: Mapping[str, Any]) -> ModuleReport:
        aot = _part(body, "aot")
        report = super().from_json({**body, "aot": None})
        return replace(report, aot=None if aot is None else ModuleAot.from_json(aot))


@dataclass(frozen=True)
class AutoCompileReport(_Flat):
    """What the zero-code hook compiled, what the script compiled, what stayed eager and why."""

    modules: list[ModuleReport] = field(default_factory=list)
    script_compiled: list[str] = field(default_factory=list)
    """Class names of the trained modules the script compiled itself."""
    skipped: dict[str, str] = field(default_factory=dict)
    """Class name -> why it was left eager."""
    error: str | None = None
    """The hook's own error, when it stopped."""

    @classmethod
    def from_json(cls, body: Mapping[str, Any]) -> AutoCompileReport:
        return cls(
            modules=[ModuleReport.from_json(entry) for entry in body.get("modules") or []],
            script_compiled=list(body.get("script_compiled") or []),
            skipped=dict(body.get("skipped") or {}),
            error=body.get("error"),
        )


@dataclass(frozen=True)
class SpeedupDecision(_Flat):
    """What the job kept, compiled or eager, with the numbers behind it."""

    keep: str = "compiled"
    """``compiled`` or ``eager``."""
    eager_step_s: float = 0.0
    compiled_step_s: float = 0.0
    speedup: float = 0.0
    """Eager step time over compiled step time."""
    reason: str = ""
    source: str = "measured"
    """``measured`` in this job, or ``stored`` by an earlier job of the lineage."""


@dataclass(frozen=True)
class SpeedupReport:
    """This process's eager-against-compiled measurement, or why there was none.

    Two forms: with the measurement's steps (``compiled_steps`` and
    ``eager_steps`` set, ``cost_s`` and ``cost_share`` written even when null),
    or only ``decision`` (null) and ``not_measured`` (the steps left None) for a
    job that could not measure at all (no compiler, an XLA engine, measurement off).
    """

    decision: SpeedupDecision | None = None
    compiled_steps: list[int] | None = None
    """1-based steps that ran compiled and clean (nothing compiled during them)."""
    eager_steps: list[int] | None = None
    """1-based steps that ran eager for the comparison."""
    not_measured: str | None = None
    cost_s: float | None = None
    """Seconds the eager steps cost over compiled ones."""
    cost_share: float | None = None
    """``cost_s`` over the process's wall time."""
    steps_from: str | None = None
    """What the steps were: ``optimizer`` steps, or ``backward`` passes of a loop that
    steps no torch.optim optimizer; None in a record of a trcomp before issue 41."""

    @property
    def measured_steps(self) -> bool:
        """Whether this is the measurement's form (with its steps)."""
        return self.compiled_steps is not None or self.eager_steps is not None

    def to_json(self) -> dict[str, Any]:
        decision = None if self.decision is None else self.decision.to_json()
        if not self.measured_steps:
            return {"decision": decision, "not_measured": self.not_measured}
        return {
            "decision": decision,
            "compiled_steps": list(self.compiled_steps or []),
            "eager_steps": list(self.eager_steps or []),
            "not_measured": self.not_measured,
            "cost_s": self.cost_s,
            "cost_share": self.cost_share,
            **({} if self.steps_from is None else {"steps_from": self.steps_from}),
        }

    @classmethod
    def from_json(cls, body: Mapping[str, Any]) -> SpeedupReport:
        decision = _part(body, "decision")
        compiled, eager = body.get("compiled_steps"), body.get("eager_steps")
        return cls(
            decision=None if decision is None else SpeedupDecision.from_json(decision),
            compiled_steps=None if compiled is None else list(compiled),
            eager_steps=None if eager is None else list(eager),
            not_measured=body.get("not_measured"),
            cost_s=body.get("cost_s"),
            cost_share=body.get("cost_share"),
            steps_from=body.get("steps_from"),
        )


@dataclass(frozen=True)
class XlaReport(_Flat):
    """torch-xla's compile count and time (its ``CompileTime`` metric) and counters."""

    compiles: int = 0
    compile_time_s: float = 0.0
    compiles_after_warmup: int | None = None
    """Compiles between the third and the last step; None with fewer than three steps."""
    counters: dict[str, int] = field(default_factory=dict)
    """``aten::`` CPU fallbacks, cache and compile counters."""


@dataclass(frozen=True)
class RankRecord:
    """One training process's record: ``rank<rank>-pid<pid>.json``.

    The parts after ``versions`` are None where they do not apply: ``autocompile``
    and ``speedup`` without trcomp's switch in the process (the compiler off, or
    torch never imported), ``xla`` without torch-xla, ``jax`` without the jax
    engine. ``hook_error`` is set when the hook failed while writing the record;
    the parts it had not reached then are None and left out of the file.
    """

    rank: int = 0
    """``RANK`` (0 outside torchrun)."""
    local_rank: int = 0
    """``LOCAL_RANK``."""
    pid: int = 0
    backend: str = "eager"
    """``TRCOMP_BACKEND``: ``inductor``, ``xla``, or ``eager`` with the compiler off."""
    wall_s: float = 0.0
    """Seconds from the hook's start to the exit."""
    steps: int = 0
    """Optimizer steps of the process's first optimizer."""
    first_step_s: float | None = None
    """Seconds from the start to the end of the first step."""
    step_intervals_s: list[float] = field(default_factory=list)
    step_clock: str = "cpu"
    """``cuda-events`` (the GPU's timeline) or ``cpu``."""
    error: ErrorReport | None = None
    warnings: list[str] = field(default_factory=list)
    versions: dict[str, str] = field(default_factory=dict)
    """Library -> version, for the libraries the script loaded."""
    autocompile: AutoCompileReport | None = None
    speedup: SpeedupReport | None = None
    compile: CompileReport | None = None
    xla: XlaReport | None = None
    jax: dict[str, Any] | None = None
    """The jax engine's counters (``trcomp.runtime.jax_engine.StepStats``)."""
    hook_error: str | None = None

    @property
    def file_name(self) -> str:
        """``rank<rank>-pid<pid>.json``."""
        return f"rank{self.rank}-pid{self.pid}.json"

    def to_json(self) -> dict[str, Any]:
        """The record as the hook writes it (the JSON keys in the file's order)."""
        body: dict[str, Any] = {
            "rank": self.rank,
            "local_rank": self.local_rank,
            "pid": self.pid,
            "backend": self.backend,
            "wall_s": self.wall_s,
            "steps": self.steps,
            "first_step_s": self.first_step_s,
            "step_intervals_s": list(self.step_intervals_s),
            "step_clock": self.step_clock,
            "error": None if self.error is None else self.error.to_json(),
            "warnings": list(self.warnings),
            "versions": dict(self.versions),
        }
        # The switch reports both parts or neither (no switch in the process).
        if self.autocompile is not None or self.speedup is not None:
            body["autocompile"] = None if self.autocompile is None else self.autocompile.to_json()
        if self.speedup is not None:
            body["speedup"] = self.speedup.to_json()
        if self.compile is not None:
            body["compile"] = self.compile.to_json()
        # After a hook error, a null part is one the hook never reached: left out, as before.
        if self.xla is not None or self.hook_error is None:
            body["xla"] = None if self.xla is None else self.xla.to_json()
        if self.jax is not None or self.hook_error is None:
            body["jax"] = None if self.jax is None else dict(self.jax)
        if self.hook_error is not None:
            body["hook_error"] = self.hook_error
        return body

    @classmethod
    def from_json(cls, body: Mapping[str, Any]) -> RankRecord:
        """The record from its JSON; missing parts read as None or their default.

        Raises ValueError when ``body`` or one of its parts is not a JSON object.
        """
        if not isinstance(body, Mapping):
            raise ValueError(f"rank record: a {type(body).__name__}, not a JSON object")
        error, auto, speedup = (
            _part(body, "error"),
            _part(body, "autocompile"),
            _part(body, "speedup"),
        )
        compile_, xla, jax = _part(body, "compile"), _part(body, "xla"), _part(body, "jax")
        return cls(
            rank=body.get("rank", 0),
            local_rank=body.get("local_rank", 0),
            pid=body.get("pid", 0),
            backend=body.get("backend", "eager"),
            wall_s=body.get("wall_s", 0.0),
            steps=body.get("steps", 0),
            first_step_s=body.get("first_step_s"),
            step_intervals_s=list(body.get("step_intervals_s") or []),
            step_clock=body.get("step_clock", "cpu"),
            error=None if error is None else ErrorReport.from_json(error),
            warnings=list(body.get("warnings") or []),
            versions=dict(body.get("versions") or {}),
            autocompile=None if auto is None else AutoCompileReport.from_json(auto),
            speedup=None if speedup is None else SpeedupReport.from_json(speedup),
            compile=None if compile_ is None else CompileReport.from_json(compile_),
            xla=None if xla is None else XlaReport.from_json(xla),
            jax=None if jax is None else dict(jax),
            hook_error=body.get("hook_error"),
        )

    def write(self, directory: Path) -> Path:
        """Write the record as ``directory/<file_name>`` (creating the directory)."""
        path = Path(directory) / self.file_name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(self.to_json(), indent=1))
        return path


def read(path: Path) -> RankRecord:
    """The record in ``path``.

    Raises OSError when it cannot be read, ValueError when it is not a record's JSON.
    """
    return RankRecord.from_json(json.loads(Path(path).read_text()))
