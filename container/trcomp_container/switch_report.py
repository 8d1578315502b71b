"""What the job compiled, and whether compiling paid: the summary's ``compiled`` and ``speedup``.

Read from the per-process records the start-up hook writes (``autocompile``,
``speedup``, ``compile``, ``xla``, ``jax``; see ``hook/trcomp_switch.py``).
A job with a compiler on that compiled nothing gets a warning saying why and
the one change to make: the compiler must never be silently off.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

__all__ = [
    "compiled_less",
    "compiled_text",
    "eager_step_numbers",
    "nothing_compiled",
    "speedup_summary",
    "warm_start",
]

Record = Mapping[str, Any]


def _count(record: Record) -> tuple[int, str]:
    """Graphs (or programs) this process compiled, and what to call them."""
    if record.get("jax"):
        return int(record["jax"].get("programs_compiled", 0)), "compile_step program"
    if record.get("xla"):
        return int(record["xla"].get("compiles", 0)), "XLA program"
    # Loaded ahead-of-time artifacts included (the hook adds them: dynamo never saw them).
    return int((record.get("compile") or {}).get("graphs", 0)), "graph"


_AOT_TEXT = {
    "loaded": ", loaded from an ahead-of-time artifact",
    "saved": ", compiled ahead of time and saved for the next job",
    "compiled": ", compiled ahead of time (not saved)",
}


def warm_start(records: Sequence[Record], cache_warm: bool) -> str:
    """Where the first compiled step came from: ``aot artifact``, ``compile cache`` or ``cold``.

    Rank 0's view, as :func:`compiled_text`. ``cache_warm``: the job's compile
    cache held files when it started.
    """
    if records:
        modules = (records[0].get("autocompile") or {}).get("modules") or []
        if any((entry.get("aot") or {}).get("path") == "loaded" for entry in modules):
            return "aot artifact"
    return "compile cache" if cache_warm else "cold"


def _plural(count: int, noun: str) -> str:
    return f"{count} {noun}{'' if count == 1 else 's'}"


def compiled_text(records: Sequence[Record], backend: str | None) -> str:
    """One line: which modules were compiled, by whom, and how many graphs (rank 0's view)."""
    if backend is None:
        return "nothing (compiler off)"
    if not records:
        return "nothing (the script did not run)"
    record = records[0]
    count, noun = _count(record)
    auto = record.get("autocompile") or {}
    parts = []
    for entry in auto.get("modules", []):
        if entry.get("failed"):
            how = "failed, ran eager"
        elif entry.get("ran_compiled") is False:
            how = "compiled by trcomp but ran eager at the end"
        else:
            how = "by trcomp, no code change"
        if entry.get("regional"):
            how += f", regional: {entry['regional']}"
        how += _AOT_TEXT.get(str((entry.get("aot") or {}).get("path")), "")
        parts.append(f"{entry['module']} ({how})")
    parts.extend(f"{name} (by the script)" for name in auto.get("script_compiled", []))
    who = ", ".join(parts) if parts else None
    if not count:
        return f"nothing{f': {who}' if who else ''}"
    return f"{who}; {_plural(count, noun)}" if who else _plural(count, noun)


def nothing_compiled(
    records: Sequence[Record], backend: str | None, engine: str | None, *, auto_compile: bool
) -> str | None:
    """The warning for a job whose compiler was on and compiled nothing; None otherwise."""
    if backend is None or not records:
        return None
    if any(_count(record)[0] for record in records):
        return None
    record = records[0]
    decision = ((record.get("speedup") or {}).get("decision")) or {}
    if decision.get("keep") == "eager" and decision.get("source") == "stored":
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
    auto = record.get("autocompile") or {}
    failed = [entry for entry in auto.get("modules", []) if entry.get("failed")]
    if failed:
        entry = failed[0]
        return (
            f"{head}: compiling {entry['module']} failed ({entry['failed']}), so it ran eager "
            "(fallback='eager'). Fix what the error names, or set fallback='fail' to stop "
            "such jobs."
        )
    breaks = (record.get("compile") or {}).get("graph_break_reasons") or {}
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
    skipped = auto.get("skipped") or {}
    seen = "; ".join(f"{name}: {why}" for name, why in list(skipped.items())[:5])
    return (
        f"{head}: no module was called in training mode with trainable parameters before "
        f"the first optimizer step{f' (seen: {seen})' if seen else ''}. Compile the model "
        "with trcomp.runtime.compile(model) (docs/runtime.md)."
    )


def eager_step_numbers(record: Record) -> list[int]:
    """The 1-based steps this process ran eager to measure the speed-up."""
    return list((record.get("speedup") or {}).get("eager_steps") or [])


def speedup_summary(records: Sequence[Record]) -> dict[str, Any] | None:
    """The job's one decision (every rank agreed on it), or why there is none."""
    if not records:
        return None
    reports: list[Record] = [r["speedup"] for r in records if r.get("speedup")]
    if not reports:
        return None
    report = next((r for r in reports if r.get("decision")), reports[0])
    decision: Mapping[str, Any] = report.get("decision") or {}
    body: dict[str, Any] = {
        "kept": decision.get("keep"),
        "eager_step_s": decision.get("eager_step_s"),
        "compiled_step_s": decision.get("compiled_step_s"),
        "speedup_vs_eager": decision.get("speedup"),
        "reason": decision.get("reason") or report.get("not_measured"),
        "source": decision.get("source"),
        "eager_steps": report.get("eager_steps") or [],
        "cost_s": report.get("cost_s"),
        "cost_share": report.get("cost_share"),
    }
    return body


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


def compiled_less(records: Sequence[Record]) -> list[str]:
    """Warnings for a job that compiled less than it would otherwise say.

    A module the hook compiled that dynamo then ran eager (its recompile limit hit,
    the frame skipped), and a model left eager because of ``nn.DataParallel``.
    """
    if not records:
        return []
    auto = records[0].get("autocompile") or {}
    warnings = []
    for entry in auto.get("modules", []):
        if entry.get("failed") or not entry.get("eager_calls"):
            continue
        limit = entry.get("limit")
        ended = "and ran eager at the end" if not entry.get("ran_compiled") else "at times"
        why = (
            f"dynamo hit its {limit.split(':', 1)[0]}: {_limit_fix(limit)}"
            if limit
            else "dynamo skipped its frame (run with TORCH_LOGS=recompiles,graph_breaks to see why)"
        )
        warnings.append(
            f"{entry['module']} was compiled, but {entry['eager_calls']} of its "
            f"{entry.get('calls', 0)} calls ran eager {ended}: {why}"
        )
    for name, reason in (auto.get("skipped") or {}).items():
        if "DataParallel" in reason:
            warnings.append(f"{name} was not compiled: {reason}")
    if auto.get("error"):
        warnings.append(str(auto["error"]))
    return warnings
