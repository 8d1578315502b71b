"""The warm-start table: folding and the table with fixed numbers. Never times."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from trcomp_bench.warmstart_table import NO_AOT, fold, markdown_table

LOSSES = [2.0, 1.5, 1.0]


def _run(version: str, kind: str, round_no: int, **extra: Any) -> dict[str, Any]:
    run: dict[str, Any] = {
        "version": version,
        "workload": "mlp",
        "round": round_no,
        "kind": kind,
        "load": [1.0, 1.2],
        "torch": {"2.9": "2.9.0+cu128", "2.14": "2.14.1+cu130"}[version],
        "first_s": None if kind == "eager" else 1.0,
        "step_s": 0.01,
        "fxgraph_cache": None,
        "losses": LOSSES,
        "aot": None,
    }
    run.update(extra)
    return run


def _runs() -> list[dict[str, Any]]:
    """Two rounds on 2.14 (cold only in the first) and one on 2.9, numbers chosen by hand."""
    return [
        _run("2.14", "eager", 0, step_s=0.020),
        _run("2.14", "cold", 0, first_s=90.0, step_s=0.010, aot={"path": "saved"}),
        _run("2.14", "cold_fx", 0, first_s=70.0, step_s=0.010, fxgraph_cache={"miss": 2}),
        _run("2.14", "fx", 0, first_s=8.0, step_s=0.012, fxgraph_cache={"hit": 2, "miss": 0}),
        _run("2.14", "aot", 0, first_s=4.0, step_s=0.010, aot={"path": "loaded"}),
        _run("2.14", "fx", 1, first_s=6.0, step_s=0.010, fxgraph_cache={"hit": 2, "miss": 0}),
        _run("2.14", "aot", 1, first_s=2.0, step_s=0.010, aot={"path": "loaded"}),
        _run("2.14", "eager", 1, step_s=0.040, losses=[2.0, 1.5, 1.25]),
        _run("2.9", "eager", 0, step_s=0.030),
        _run("2.9", "cold", 0, first_s=100.0, step_s=0.015, aot={"path": "off"}),
        _run("2.9", "fx", 0, error="RunFailed: timed out after 1200 s"),
    ]


def test_fold_medians_ratios_and_paths() -> None:
    new, old = fold(_runs(), load_bound=2.0)

    assert (new["version"], new["torch"], new["aot_applies"]) == ("2.14", "2.14.1+cu130", True)
    assert new["first_cold_s"] == 90.0
    assert new["first_cold_fx_s"] == 70.0
    assert new["first_fx_s"] == 7.0  # median of 8 and 6
    assert new["first_aot_s"] == 3.0
    assert new["eager_step_s"] == pytest.approx(0.030)
    # Round 0: eager 0.020 over the median compiled step 0.010; round 1: 0.040 over 0.010.
    assert new["vs_eager_rounds"] == pytest.approx([2.0, 4.0])
    assert new["paths"] == {
        "cold": ["saved"], "cold_fx": ["none"], "fx": ["none"], "aot": ["loaded"]
    }  # fmt: skip
    assert (new["fx_hits"], new["fx_misses"]) == (4, 0)
    assert new["max_loss_diff"] == pytest.approx(0.25)  # round 1's eager differs at step 3
    assert new["load"] == [1.0, 1.2]
    assert "rounds disagree" in new["unreliable"]
    assert new["errors"] == []

    assert old["aot_applies"] is False and old["first_aot_s"] is None
    assert old["first_fx_s"] is None
    assert old["first_cold_fx_s"] is None and set(old["paths"]) == {"cold", "fx"}
    assert old["vs_eager_rounds"] == pytest.approx([2.0])
    assert old["errors"] == ["fx (round 0): RunFailed: timed out after 1200 s"]
    assert new["not_run"] == [] and old["not_run"] == []  # the fx run ran, and failed
    assert fold(_runs()[:-1], load_bound=2.0)[1]["not_run"] == ["fx"]


def test_table_names_the_paths_and_says_why_2_9_has_no_aot_cell() -> None:
    text = markdown_table({"rows": fold(_runs(), load_bound=2.0)})
    lines = text.splitlines()
    assert lines[0].startswith("| torch | workload | first step, cold |")
    new, old = lines[2], lines[3]
    assert "| 90.0 s (saved) | 70.0 s | 7.0 s (hits 4, misses 0) | 3.0 s (loaded) |" in new
    assert "| 100.0 s (off) | the cold column |" in old
    assert "| 3.00x (2.00-4.00, 2) |" in new
    assert "2.14.1+cu130" in new
    assert NO_AOT.format(version="2.9") == "n/a (torch 2.9 has no aot_compile)"
    assert "| n/a (torch 2.9 has no aot_compile) |" in old
    assert "| not measured (hits 0, misses 0) |" in old
    assert "fx (round 0): RunFailed" in old
    short = markdown_table({"rows": fold(_runs()[:-1], load_bound=2.0)}).splitlines()[3]
    assert "| not run: fx (budget spent) |" in short


def test_the_table_is_what_doctables_renders(tmp_path: Path) -> None:
    from trcomp_bench.doctables import render

    data = {"conditions": {}, "rows": fold(_runs(), load_bound=2.0), "runs": _runs()}
    path = tmp_path / "warmstart.json"
    path.write_text(json.dumps(data))
    assert render("warmstart", path) == markdown_table(data)
