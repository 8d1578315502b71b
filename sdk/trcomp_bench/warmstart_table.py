"""The warm-start benchmark's rows and table: pure functions of the runs, no timing.

:func:`fold` turns the runs of :func:`trcomp_bench.warmstart_run.run_warmstart`
into one row per (torch version, workload); :func:`markdown_table` renders the
rows as the docs' table (``make docs`` renders the committed JSON with it, through
:mod:`trcomp_bench.doctables`).
"""

from __future__ import annotations

import statistics
from collections.abc import Sequence
from typing import Any

from trcomp_bench.rounds import default_load_bound, judge, ratio_and_spread, round_ratios
from trcomp_bench.warmstart_run import AOT_KINDS, KINDS, has_aot

__all__ = ["NO_AOT", "fold", "markdown_table"]

NO_AOT = "n/a (torch {version} has no aot_compile)"


def _median(values: Sequence[float | None]) -> float | None:
    known = [v for v in values if v is not None]
    return float(statistics.median(known)) if known else None


def _load_range(loads: Sequence[float | None]) -> list[float] | None:
    known = [load for load in loads if load is not None]
    return [min(known), max(known)] if known else None


def _max_diff(runs: Sequence[dict[str, Any]], eager: Sequence[dict[str, Any]]) -> float | None:
    reference = {run["round"]: run["losses"] for run in eager}
    diffs = [
        abs(a - b)
        for run in runs
        if run["round"] in reference
        for a, b in zip(run["losses"], reference[run["round"]], strict=False)
    ]
    return max(diffs) if diffs else None


def fold(
    runs: Sequence[dict[str, Any]], *, load_bound: float | None = None
) -> list[dict[str, Any]]:
    """One row per (version, workload): medians over rounds, per-round ratios, the paths.

    ``first_*_s`` are the median first compiled steps of the cold, FX-warm and
    AOT-warm runs, ``first_cold_fx_s`` the cold ones of the normal path (torch
    >= 2.14; elsewhere ``cold`` is that path); ``eager_step_s`` and ``step_s``
    the median steady steps of the eager runs and of the compiled ones (all
    kinds: the steady step
    does not depend on how the run started); ``vs_eager_rounds`` each round's
    eager step over its compiled step; ``paths`` which path each kind's runs
    took (the hook's record); ``fx_hits``/``fx_misses`` the FX-graph cache's
    counters summed over the ``fx`` runs.
    """
    bound = default_load_bound() if load_bound is None else load_bound
    keys = list(dict.fromkeys((run["version"], run["workload"]) for run in runs))
    rows = []
    for version, workload in keys:
        mine = [r for r in runs if (r["version"], r["workload"]) == (version, workload)]
        good = [r for r in mine if "error" not in r]
        by_kind = {kind: [r for r in good if r["kind"] == kind] for kind in KINDS}
        compiled = [r for r in good if r["kind"] != "eager"]
        rounds = sorted({r["round"] for r in good})
        eager_steps, steps = [], []
        for round_no in rounds:
            eager = [r["step_s"] for r in by_kind["eager"] if r["round"] == round_no]
            comp = [r["step_s"] for r in compiled if r["round"] == round_no]
            if eager and comp:
                eager_steps.append(statistics.median(eager))
                steps.append(statistics.median(comp))
        ratios = round_ratios(eager_steps, steps)
        loads = [load for r in mine for load in r["load"]]
        fx = [r.get("fxgraph_cache") or {} for r in by_kind["fx"]]
        rows.append(
            {
                "version": version,
                "torch": next((r["torch"] for r in good if r.get("torch")), None),
                "workload": workload,
                "aot_applies": has_aot(version),
                "first_cold_s": _median([r["first_s"] for r in by_kind["cold"]]),
                "first_cold_fx_s": _median([r["first_s"] for r in by_kind["cold_fx"]]),
                "first_fx_s": _median([r["first_s"] for r in by_kind["fx"]]),
                "first_aot_s": _median([r["first_s"] for r in by_kind["aot"]]),
                "eager_step_s": _median([r["step_s"] for r in by_kind["eager"]]),
                "step_s": _median([r["step_s"] for r in compiled]),
                "vs_eager_rounds": ratios,
                "max_loss_diff": _max_diff(compiled, by_kind["eager"]),
                "paths": {
                    kind: sorted(
                        {(r.get("aot") or {}).get("path") or "none" for r in by_kind[kind]}
                    )
                    for kind in KINDS[1:]
                    if kind not in AOT_KINDS or has_aot(version)
                },
                "fx_hits": sum(int(c.get("hit", 0)) for c in fx),
                "fx_misses": sum(int(c.get("miss", 0)) for c in fx),
                "load": _load_range(loads),
                "not_run": [
                    kind
                    for kind in KINDS
                    if (kind not in AOT_KINDS or has_aot(version))
                    and not any(r["kind"] == kind for r in mine)
                ],
                "errors": [
                    f"{r['kind']} (round {r['round']}): {r['error']}" for r in mine if "error" in r
                ],
                "unreliable": judge(ratios, loads, load_bound=bound),
            }
        )
    return rows


def _secs(value: float | None) -> str:
    return "not measured" if value is None else f"{value:.1f} s"


def _ms(value: float | None) -> str:
    return "not measured" if value is None else f"{value * 1e3:.2f} ms"


def _path(row: dict[str, Any], kind: str) -> str:
    return "/".join(row["paths"].get(kind) or ["none"])


def markdown_table(data: dict[str, Any]) -> str:
    """The folded rows (``data["rows"]``) as the docs' table.

    Each first-step cell names the path the hook's record says ran; "vs eager"
    is the median of the rounds' ratios with their range and count; "flags"
    holds :func:`~trcomp_bench.rounds.judge`'s verdict and any failed run.
    """
    from trcomp_bench.results import table

    header = [
        "torch", "workload", "first step, cold", "cold, aot=False", "warm, FX-graph cache",
        "warm, AOT artifact",
        "eager step", "compiled step", "vs eager (range, rounds)", "max loss diff vs eager",
        "load (1 min)", "flags",
    ]  # fmt: skip
    lines = []
    for row in data["rows"]:
        no_aot = NO_AOT.format(version=row["version"])
        aot = f"{_secs(row['first_aot_s'])} ({_path(row, 'aot')})" if row["aot_applies"] else no_aot
        cold_fx = _secs(row.get("first_cold_fx_s")) if row["aot_applies"] else "the cold column"
        fx_cache = f"hits {row['fx_hits']}, misses {row['fx_misses']}"
        if row["vs_eager_rounds"]:
            mid, low, high = ratio_and_spread(row["vs_eager_rounds"])
            ratio = f"{mid:.2f}x ({low:.2f}-{high:.2f}, {len(row['vs_eager_rounds'])})"
        else:
            ratio = "n/a"
        diff = "n/a" if row["max_loss_diff"] is None else f"{row['max_loss_diff']:.1e}"
        load = "n/a" if not row["load"] else f"{row['load'][0]:.1f}-{row['load'][1]:.1f}"
        not_run = row.get("not_run") and f"not run: {', '.join(row['not_run'])} (budget spent)"
        flags = "; ".join(filter(None, [row["unreliable"], not_run, *row["errors"]])) or "none"
        lines.append(
            [
                row["torch"] or row["version"],
                row["workload"],
                f"{_secs(row['first_cold_s'])} ({_path(row, 'cold')})",
                cold_fx,
                f"{_secs(row['first_fx_s'])} ({fx_cache})",
                aot,
                _ms(row["eager_step_s"]),
                _ms(row["step_s"]),
                ratio,
                diff,
                load,
                flags,
            ]
        )
    return table(header, lines)
