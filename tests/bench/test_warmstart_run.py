"""The warm-start runs per torch version: the run's order and cache dirs with a stand-in
worker, each kind's environment, and one tiny real run (slow). Never times."""

from __future__ import annotations

import os
import sys
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import pytest

from tests.helpers import vec_isa
from trcomp_bench import warmstart_run
from trcomp_bench.warmstart_run import WarmOptions, has_aot
from trcomp_bench.warmstart_table import fold

LOSSES = [2.0, 1.5, 1.0]


def test_has_aot_from_2_14_on() -> None:
    assert not has_aot("2.9")
    assert not has_aot("2.13.0")
    assert has_aot("2.14")
    assert has_aot("2.14.1+cu130")
    assert has_aot("3.0")


def test_run_order_cache_dirs_and_environments(monkeypatch: pytest.MonkeyPatch) -> None:
    """Cold first and only in the first round; on 2.14 a second cold run with aot=False;
    fx on a copy of the normal path's cold dir without aot/; aot on the cold dir."""
    from trcomp.contract.runtime_config import RuntimeConfig

    monkeypatch.setattr(warmstart_run, "python_for", lambda version, environ=None: f"py-{version}")
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
        warmstart_run.run_warmstart(
            WarmOptions(versions=("2.9",), budget_s=0.0), worker=worker, log=lambda line: None
        )
        == []
    )  # a spent budget starts nothing
    runs = warmstart_run.run_warmstart(options, worker=worker, log=lambda line: None)
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
        kind: warmstart_run.run_env(kind, job=tmp_path / kind, cache=tmp_path / "c", base_env=base)
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
        warmstart_run.run_env("warm", job=tmp_path, cache=tmp_path, base_env=base)


@pytest.mark.slow
def test_a_tiny_real_run_on_this_torch(tmp_path: Path, clean_env: pytest.MonkeyPatch) -> None:
    """The zero-code path really compiles: the hook's record and inductor's counters say so."""
    import importlib.metadata

    from trcomp_bench.harness import run_measurement

    def worker(python: str, spec: Any, env: Mapping[str, str]) -> dict[str, Any]:
        # The real worker, with one variable the run's job environment leaves out
        # (TORCHINDUCTOR_*): inductor's per-process ISA checks cost each compiling run
        # seconds of CPU here and are not what this test is about (tests/helpers/vec_isa.py).
        return run_measurement(spec, {**env, **vec_isa.environment()}, python=python)

    version = ".".join(importlib.metadata.version("torch").split(".")[:2])
    options = WarmOptions(versions=(version,), workloads=("mlp",), steps=3, warmup=1, rounds=1)
    runs = warmstart_run.run_warmstart(options, worker=worker, log=lambda line: None)
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
