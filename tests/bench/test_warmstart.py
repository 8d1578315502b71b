"""The warm-start run per torch version: folding and table with fixed numbers, the run's
order and cache dirs with a stand-in worker, and one tiny real run (slow). Never times."""

from __future__ import annotations

import json
import os
import sys
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import pytest

from trcomp_bench import warmstart
from trcomp_bench.warmstart import NO_AOT, WarmOptions, fold, has_aot, markdown_table

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


def test_has_aot_from_2_14_on() -> None:
    assert not has_aot("2.9")
    assert not has_aot("2.13.0")
    assert has_aot("2.14")
    assert has_aot("2.14.1+cu130")
    assert has_aot("3.0")


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


def test_run_order_cache_dirs_and_environments(monkeypatch: pytest.MonkeyPatch) -> None:
    """Cold first and only in the first round; on 2.14 a second cold run with aot=False;
    fx on a copy of the normal path's cold dir without aot/; aot on the cold dir."""
    from trcomp.contract.runtime_config import RuntimeConfig

    monkeypatch.setattr(warmstart, "python_for", lambda version, environ=None: f"py-{version}")
    seen: list[dict[str, Any]] = []

    def worker(python: str, spec: Any, env: Mapping[str, str]) -> dict[str, Any]:
        cache = Path(env.get("TRCOMP_CACHE_DIR", "/nonexistent"))  # eager: no compile cache
        seen.append(
            {"python": python, "cache": cache, "zero_code": spec.zero_code,
             "aot_files": sorted(p.name for p in (cache / "aot").glob("*")),
             "graphs": sorted(p.name for p in (cache / "inductor").glob("*"))}
        )  # fmt: skip
        if spec.zero_code and not (cache / "inductor").exists():  # a cold run fills the cache
            aot = RuntimeConfig.from_env(env).aot
            if aot:
                (cache / "aot").mkdir(parents=True)
                (cache / "aot" / "key.pt2").write_text("artifact")
            (cache / "inductor").mkdir(parents=True)
            (cache / "inductor" / str(int(aot))).write_text("graphs")
        return {
            "losses": LOSSES, "step_times_s": [0.01, 0.01], "first_compiled_step_s": 1.0,
            "torch": python,
        }  # fmt: skip

    options = WarmOptions(versions=("2.9", "2.14"), workloads=("mlp",), steps=3, warmup=1)
    assert (
        warmstart.run_warmstart(
            WarmOptions(versions=("2.9",), budget_s=0.0), worker=worker, log=lambda line: None
        )
        == []
    )  # a spent budget starts nothing
    runs = warmstart.run_warmstart(options, worker=worker, log=lambda line: None)
    order = [(r["round"], r["version"], r["kind"]) for r in runs]
    assert order == [
        (0, "2.9", "eager"), (0, "2.9", "cold"), (0, "2.9", "fx"),
        (0, "2.14", "eager"), (0, "2.14", "cold"), (0, "2.14", "cold_fx"), (0, "2.14", "fx"),
        (0, "2.14", "aot"),
        # round 1: the other version first, eager last, no cold run
        (1, "2.14", "fx"), (1, "2.14", "aot"), (1, "2.14", "eager"),
        (1, "2.9", "fx"), (1, "2.9", "eager"),
    ]  # fmt: skip
    assert [s["python"] for s in seen[:3]] == ["py-2.9"] * 3
    assert all(s["zero_code"] == (r["kind"] != "eager") for s, r in zip(seen, runs, strict=True))
    by_order = dict(zip(order, seen, strict=True))
    cold = by_order[0, "2.14", "cold"]["cache"]
    assert by_order[0, "2.14", "aot"]["cache"] == cold
    assert by_order[1, "2.14", "aot"]["cache"] == cold  # later rounds warm from round 0's
    assert by_order[0, "2.14", "aot"]["aot_files"] == ["key.pt2"]
    fx = by_order[0, "2.14", "fx"]["cache"]
    cold_fx = by_order[0, "2.14", "cold_fx"]["cache"]
    assert len({fx, cold, cold_fx}) == 3 and by_order[0, "2.14", "fx"]["aot_files"] == []
    assert by_order[0, "2.14", "fx"]["graphs"] == ["0"]  # cold_fx's graphs (aot=False)
    assert by_order[0, "2.14", "cold_fx"]["aot_files"] == []
    assert by_order[0, "2.9", "fx"]["aot_files"] == []
    assert all("error" not in r and len(r["load"]) == 2 for r in runs)


def test_run_env_is_the_entrypoints_for_each_kind(tmp_path: Path) -> None:
    from trcomp.contract.runtime_config import RuntimeConfig

    base = {"PATH": os.environ.get("PATH", ""), "PYTHONPATH": os.environ.get("PYTHONPATH", "")}
    envs = {
        kind: warmstart.run_env(kind, job=tmp_path / kind, cache=tmp_path / "c", base_env=base)
        for kind in ("eager", "cold", "cold_fx", "fx", "aot")
    }
    resolved = {kind: RuntimeConfig.from_env(env) for kind, env in envs.items()}
    assert not resolved["eager"].enabled and resolved["eager"].backend is None
    assert "TRCOMP_CACHE_DIR" not in envs["eager"]
    for kind in ("cold", "cold_fx", "fx", "aot"):
        config = resolved[kind]
        assert config.enabled and config.backend == "inductor"
        assert not config.measure_speedup and config.keep_faster is False
        assert envs[kind]["TRCOMP_CACHE_DIR"] == str(tmp_path / "c")
    assert resolved["cold"].aot and resolved["aot"].aot
    assert not resolved["fx"].aot and not resolved["cold_fx"].aot
    with pytest.raises(ValueError, match="unknown run kind"):
        warmstart.run_env("warm", job=tmp_path, cache=tmp_path, base_env=base)


@pytest.mark.slow
def test_a_tiny_real_run_on_this_torch(tmp_path: Path, clean_env: pytest.MonkeyPatch) -> None:
    """The zero-code path really compiles: the hook's record and inductor's counters say so."""
    import importlib.metadata

    version = ".".join(importlib.metadata.version("torch").split(".")[:2])
    options = WarmOptions(versions=(version,), workloads=("mlp",), steps=3, warmup=1, rounds=1)
    runs = warmstart.run_warmstart(options, log=lambda line: None)
    assert [r.get("error") for r in runs] == [None] * len(runs), runs
    kinds = {r["kind"]: r for r in runs}
    assert kinds["cold"]["compile_events"] >= 1
    assert kinds["fx"]["compile_events"] >= 1 and kinds["fx"]["aot"] is None  # aot=False
    if has_aot(version):
        assert kinds["cold"]["aot"]["path"] == "saved"
        assert kinds["aot"]["aot"]["path"] == "loaded"
        # The fx run warms from the cold run of the normal path (aot=False): an
        # ahead-of-time compile writes none of the FX-graph cache entries it looks up.
        assert kinds["cold_fx"]["aot"] is None
        assert kinds["fx"]["fxgraph_cache"]["hit"] >= 1
    else:
        assert kinds["fx"]["fxgraph_cache"]["hit"] >= 1
        assert kinds["cold"]["aot"]["path"] == "off"
        assert "aot" not in kinds and "cold_fx" not in kinds
    (row,) = fold(runs)
    assert row["max_loss_diff"] is not None and row["max_loss_diff"] < 1e-4
    assert sys.executable  # the run used this interpreter (python_for's first rule)


@pytest.mark.parametrize("name", ["tiny_lm", "mlp", "cnn"])
def test_workload_models_have_importable_classes(name: str) -> None:
    """An AOT artifact names the model's classes by import path: none may be a local class."""
    pytest.importorskip("torch")
    from trcomp_bench.workloads import get_workload

    model, _ = get_workload(name).factory("tiny")(2)
    for module in model.modules():
        cls = type(module)
        assert "<locals>" not in cls.__qualname__, cls
        assert getattr(sys.modules[cls.__module__], cls.__qualname__) is cls
