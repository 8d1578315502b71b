"""What the job compiled, and whether compiling paid: the summary's ``compiled`` and ``speedup``.

Read from the per-process records the start-up hook writes (their ``autocompile``,
``speedup``, ``compile``, ``xla`` and ``jax`` parts; see
:mod:`trcomp_container.inprocess.record`).
A job with a compiler on that compiled nothing gets a warning saying why and
the one change to make: the compiler must never be silently off.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from trcomp_container.inprocess.accelerate_compile import BY_ACCELERATE
from trcomp_container.inprocess.record import RankRecord, SpeedupDecision
from trcomp_container.inprocess.state import ModuleState

__all__ = [
    "compiled_less",
    "compiled_text",
    "eager_step_numbers",
    "first_step_skew",
    "no_compiled_code_ran",
    "nothing_compiled",
    "ranks_text",
    "shown_decision",
    "speedup_summary",
    "verified_text",
    "warm_start",
]


def _count(record: RankRecord) -> tuple[int, str]:
    """Graphs (or programs) this process compiled, and what to call them."""
    if record.jax:
        return int(record.jax.get("programs_compiled", 0)), "compile_step program"
    if record.xla is not None:
        return int(record.xla.compiles), "XLA program"
    # Loaded ahead-of-time artifacts included (the hook adds them: dynamo never saw them).
    return (int(record.compile.graphs) if record.compile is not None else 0), "graph"


_SECONDS = "\x00seconds"
"""Where a verification text gets its seconds, once its module's group is known."""
_AOT_TEXT = {
    "loaded": ", loaded from an ahead-of-time artifact",
    "saved": ", compiled ahead of time and saved for the next job",
    "compiled": ", compiled ahead of time (not saved)",
}


def warm_start(records: Sequence[RankRecord], cache_warm: bool) -> str:
    """Where the first compiled step came from: ``aot artifact``, ``compile cache`` or ``cold``.

    Rank 0's view, as :func:`compiled_text`. ``cache_warm``: the job's compile
    cache held files when it started.
    """
    auto = records[0].autocompile if records else None
    if auto is not None and any(
        entry.aot is not None and entry.aot.path == "loaded" for entry in auto.modules
    ):
        return "aot artifact"
    return "compile cache" if cache_warm else "cold"


def _plural(count: int, noun: str) -> str:
    return f"{count} {noun}{'' if count == 1 else 's'}"


def compiled_text(records: Sequence[RankRecord], backend: str | None) -> str:
    """One line: which modules were compiled, by whom, and how many graphs (rank 0's view)."""
    if backend is None:
        return "nothing (compiler off)"
    if not records:
        return "nothing (the script did not run)"
    record = records[0]
    count, noun = _count(record)
    auto = record.autocompile
    described = []
    for entry in auto.modules if auto is not None else []:
        if entry.failed and entry.failed.startswith("verification: "):
            how = "kept eager by its check"
        elif entry.failed:
            how = "failed, ran eager"
        elif not entry.module_state.runs_compiled:
            how = "compiled by trcomp but ran eager at the end"
        elif entry.by == BY_ACCELERATE:
            how = "by trcomp through Accelerate, no code change"
        elif entry.by != "trcomp":
            how = f"by the script, through {entry.by}"
        else:
            how = "by trcomp, no code change"
        if entry.regional:
            how += f", regional: {entry.regional}"
        how += _AOT_TEXT.get(entry.aot.path if entry.aot is not None else "", "")
        described.append((entry, how))
    parts = [f"{who} ({how})" for who, how in map(_who, _groups(described))]
    if auto is not None:
        parts.extend(f"{name} (by the script)" for name in auto.script_compiled)
    who = ", ".join(parts) if parts else None
    if not count:
        return f"nothing{f': {who}' if who else ''}"
    return f"{who}; {_plural(count, noun)}" if who else _plural(count, noun)


def verified_text(records: Sequence[RankRecord]) -> str | None:
    """What checking compiled modules against eager found and cost (rank 0's view, where the
    ranks agreed); None when nothing was checked."""
    auto = records[0].autocompile if records else None
    described = []
    for entry in auto.modules if auto is not None else []:
        if not entry.verified_calls:
            continue
        cost = f"{_plural(entry.verified_calls, 'graph')} checked on copies, {_SECONDS}"
        state = entry.module_state
        if entry.rechecks:
            cost += f"; {_plural(entry.rechecks, 'later graph')} checked too"
        if entry.unchecked_graphs:
            why = entry.unchecked_reason or "a job of several ranks: a verdict round on one rank"
            cost += f"; {_plural(entry.unchecked_graphs, 'graph')} unchecked ({why})"
        if entry.double_backwards:
            cost += (
                f"; {_plural(entry.double_backwards, 'backward')} with create_graph=True "
                "recomputed it eagerly"
            )
        if entry.verified:
            outcome = f"matched eager ({cost})"
        elif entry.verified is False:
            why = (entry.failed or "").removeprefix("verification: ")
            outcome = f"kept eager ({cost}): {why}"
        elif state is ModuleState.COMPILED_VERIFIED:
            # A later graph's check (a smaller last batch) that the job's end cut off:
            # the module keeps the verdict of the check it passed.
            outcome = (
                f"matched eager ({cost}; a later graph's check was cut off by the job's "
                "end, the earlier verdict stands)"
            )
        else:
            outcome = f"not decided ({cost}; the job ended during its check)"
        described.append((entry, outcome))
    parts = []
    for group in _groups(described):
        who, outcome = _who(group)
        seconds = f"{sum(entry.verify_s for entry, _ in group):.1f} s"
        if len(group) > 1:
            outcome = outcome.replace(" checked on copies", " checked on copies each", 1)
            seconds += " in all"
        compile_s = sum(entry.verify_compile_s for entry, _ in group)
        if compile_s:
            seconds += f"; compiling inside the check {compile_s:.1f} s"
        parts.append(f"{who} {outcome.replace(_SECONDS, seconds, 1)}")
    return "; ".join(parts) or None


def _groups(described: list[tuple[Any, str]]) -> list[list[tuple[Any, str]]]:
    """Runs of FSDP2 blocks of one model with the same text, each run one group."""
    groups: list[list[tuple[Any, str]]] = []
    for entry, text in described:
        last = groups[-1][-1] if groups else None
        if (
            last is not None
            and entry.block_of
            and (last[0].block_of, last[1]) == (entry.block_of, text)
        ):
            groups[-1].append((entry, text))
        else:
            groups.append([(entry, text)])
    return groups


def _who(group: list[tuple[Any, str]]) -> tuple[str, str]:
    """(who, text) of a group: ``3 FSDP2 blocks of Net`` for a run of blocks."""
    entry, text = group[0]
    who = entry.module if len(group) == 1 else f"{len(group)} FSDP2 blocks of {entry.block_of}"
    return who, text


def first_step_skew(records: Sequence[RankRecord]) -> float | None:
    """Seconds between the first and the last rank's first optimizer step (several ranks)."""
    firsts = [record.first_step_s for record in records if record.first_step_s is not None]
    return round(max(firsts) - min(firsts), 4) if len(firsts) > 1 else None


def ranks_text(records: Sequence[RankRecord]) -> str | None:
    """Per rank: compiled or loaded from the cache, how long it waited its turn and its first
    step; then the first-step skew. None with one process."""
    if len(records) < 2:
        return None
    parts = []
    for record in records:
        compile_info = record.compile
        if compile_info is None or not compile_info.events:
            parts.append(f"rank {record.rank}: compiled nothing")
            continue
        cache = compile_info.cache
        hits, misses = (cache.fxgraph_hit, cache.fxgraph_miss) if cache else (0, 0)
        text = f"rank {record.rank}: {hits} of {hits + misses} inductor graphs from the cache"
        turns = compile_info.turns or {}
        if turns.get("waited_s", 0) >= 0.05:  # grace waits too: every second it lost
            text += f" after waiting {turns['waited_s']:.1f} s for the host's first rank"
        text += f", compiling {compile_info.time_s:.1f} s"
        if record.first_step_s is not None:
            text += f", first step at {record.first_step_s:.1f} s"
        parts.append(text)
    skew = first_step_skew(records)
    if skew is not None:
        parts.append(f"first-step skew {skew:.2f} s")
    return "; ".join(parts)


def nothing_compiled(
    records: Sequence[RankRecord], backend: str | None, engine: str | None, *, auto_compile: bool
) -> str | None:
    """The warning for a job whose compiler was on and compiled nothing; None otherwise."""
    if backend is None or not records:
        return None
    if any(_count(record)[0] for record in records):
        return None
    record = records[0]
    decision = record.speedup.decision if record.speedup is not None else None
    if decision is not None and decision.keep == "eager" and decision.source == "stored":
        return None  # ran eager on purpose: speedup says so
    head = f"backend {backend} was on but nothing was compiled"
    if engine == "jax":
        return (
            f"{head}: the jax engine compiles only trcomp.runtime.compile_step functions. "
            "Wrap the training step in trcomp.runtime.compile_step (docs/xla-gpu.md)."
        )
    if engine == "torch_xla":
        return (
            f"{head}: the script never ran a graph on the XLA device. Put the model and "
            "batches on trcomp.runtime.device() (docs/runtime.md)."
        )
    auto = record.autocompile
    failed = [entry for entry in auto.modules if entry.failed] if auto is not None else []
    if failed:
        entry = failed[0]
        return (
            f"{head}: compiling {entry.module} failed ({entry.failed}), so it ran eager "
            "(fallback='eager'). Fix what the error names, or set fallback='fail' to stop "
            "such jobs."
        )
    breaks = record.compile.graph_break_reasons if record.compile is not None else {}
    if breaks:
        reason = next(iter(breaks))
        return (
            f"{head}: dynamo could not trace the model and fell back to Python ({reason}). "
            "Make the model's forward traceable (summary.json graph_break_reasons), or "
            "compile the parts that are with trcomp.runtime.compile."
        )
    if not auto_compile:
        return (
            f"{head}: auto_compile=False and the script compiled nothing itself. Set "
            "auto_compile=True, or compile the model with trcomp.runtime.compile(model)."
        )
    skipped = auto.skipped if auto is not None else {}
    seen = "; ".join(f"{name}: {why}" for name, why in list(skipped.items())[:5])
    return (
        f"{head}: no module was called in training mode with trainable parameters before "
        f"the first optimizer step{f' (seen: {seen})' if seen else ''}. Compile the model "
        "with trcomp.runtime.compile(model) (docs/runtime.md)."
    )


def eager_step_numbers(record: RankRecord) -> list[int]:
    """The 1-based steps this process ran eager to measure the speed-up."""
    return list(record.speedup.eager_steps or []) if record.speedup is not None else []


def speedup_summary(records: Sequence[RankRecord]) -> dict[str, Any] | None:
    """The job's one decision (every rank agreed on it), or why there is none."""
    reports = [record.speedup for record in records if record.speedup is not None]
    if not reports:
        return None
    report = next((r for r in reports if r.decision is not None), reports[0])
    decision = report.decision
    never = no_compiled_code_ran(records)
    if never is not None and decision is not None and not _eager_on_purpose(decision):
        # Both windows ran the same eager code: the figure would be the window's noise.
        decision = None
    not_measured = never if never is not None and decision is None else report.not_measured
    if decision is None and records and not records[0].steps:
        not_measured = f"{not_measured or 'not measured'}{_compile_cost(records)}"
    return {
        "kept": decision.keep if decision else None,
        "eager_step_s": decision.eager_step_s if decision else None,
        "compiled_step_s": decision.compiled_step_s if decision else None,
        "speedup_vs_eager": decision.speedup if decision else None,
        "reason": (decision.reason if decision else None) or not_measured,
        "source": decision.source if decision else None,
        "eager_steps": list(report.eager_steps or []),
        "cost_s": report.cost_s,
        "cost_share": report.cost_share,
        "steps_from": report.steps_from,
    }


def no_compiled_code_ran(records: Sequence[RankRecord]) -> str | None:
    """Why no step of the job ran compiled code, when none did (rank 0's view); else None.

    Only for modules the hook compiled or adopted: with a model the script compiled
    itself (plain ``torch.compile``) the hook cannot see its calls, and says nothing.
    """
    auto = records[0].autocompile if records else None
    if auto is None or not auto.modules or auto.script_compiled:
        return None
    if any(entry.calls > 0 or entry.module_state.runs_compiled for entry in auto.modules):
        return None
    why = "; ".join(
        f"{entry.module}: {entry.failed or entry.module_state.value}" for entry in auto.modules
    )
    return f"no compiled code ran, so there is nothing to compare with eager ({why})"[:600]


def shown_decision(record: RankRecord) -> SpeedupDecision | None:
    """The record's decision, or None where no compiled code ran (its windows compared
    eager with eager); a stored decision to run eager stays (eager on purpose)."""
    decision = record.speedup.decision if record.speedup is not None else None
    if decision is None or _eager_on_purpose(decision):
        return decision
    return None if no_compiled_code_ran([record]) is not None else decision


def _eager_on_purpose(decision: SpeedupDecision) -> bool:
    return decision.keep == "eager" and decision.source == "stored"


def _compile_cost(records: Sequence[RankRecord]) -> str:
    """What compiling cost a job that could not measure (a loop without steps)."""
    compile_info = records[0].compile
    if compile_info is None or not compile_info.time_s:
        return ""
    return (
        f"; compiling cost {compile_info.time_s:.1f} s and the compiled code was kept "
        "unmeasured: no step was found to time it against eager"
    )


def _limit_fix(limit: str) -> str:
    """The change that would help, from dynamo's last recompile reason."""
    reason = limit.lower()
    if any(word in reason for word in ("size", "shape", "stride")):
        return (
            "the input shapes change between calls: pad or bucket them to a few shapes, or "
            "set dynamic=True"
        )
    return (
        "the forward reads a Python value (an attribute, a global or a non-tensor argument) "
        "that changes between calls, and each value compiles again: keep it constant or pass "
        "it as a tensor (dynamic=True does not help here)"
    )


def compiled_less(records: Sequence[RankRecord]) -> list[str]:
    """Warnings for a job that compiled less than it would otherwise say.

    A module the hook compiled that dynamo then ran eager (its recompile limit hit,
    the frame skipped, a limit hit in a frame it calls), one whose compiled graphs held
    none of its computation, and a model left eager because of ``nn.DataParallel``.
    """
    auto = records[0].autocompile if records else None
    if auto is None:
        return []
    warnings = []
    for entry in auto.modules:
        if entry.failed:
            continue
        limit = entry.limit
        hit = f"dynamo hit its {limit.split(': ', 1)[0]}: {_limit_fix(limit)}" if limit else ""
        if entry.graphs_seen == 0:
            warnings.append(
                f"{entry.module} was compiled, but none of its computation ran compiled: dynamo "
                "broke the graph before any of it (summary.json graph_break_reasons says "
                f"where){f'; {hit}' if hit else ''}"
            )
            continue
        if not entry.eager_calls and limit:
            warnings.append(f"{entry.module} was compiled, but {hit}; those calls ran eager")
        if not entry.eager_calls:
            continue
        ended = "and ran eager at the end" if not entry.ran_compiled else "at times"
        why = hit or (
            "dynamo skipped its frame (run with TORCH_LOGS=recompiles,graph_breaks to see why)"
        )
        warnings.append(
            f"{entry.module} was compiled, but {entry.eager_calls} of its "
            f"{entry.calls} calls ran eager {ended}: {why}"
        )
    for name, reason in auto.skipped.items():
        if "DataParallel" in reason:
            warnings.append(f"{name} was not compiled: {reason}")
    if auto.error:
        warnings.append(str(auto.error))
    return warnings
