"""The warm-start command line: its options, what it writes, the names it exports. Never times."""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from trcomp_bench import warmstart, warmstart_run, warmstart_table

RUNS = [
    {"version": "2.9", "workload": "mlp", "round": 0, "kind": kind, "load": [1.0, 1.0],
     "torch": "2.9.0", "first_s": None if kind == "eager" else 9.0, "step_s": 0.01,
     "fxgraph_cache": {"hit": 1, "miss": 0} if kind == "fx" else None,
     "losses": [2.0, 1.0], "aot": None}
    for kind in ("eager", "cold", "fx")
]  # fmt: skip


def test_main_parses_the_options_and_writes_the_json_and_the_table(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    seen: list[warmstart.WarmOptions] = []

    def run(
        options: warmstart.WarmOptions, *, progress: Callable[[list[dict[str, Any]]], object]
    ) -> list[dict[str, Any]]:
        seen.append(options)
        progress(RUNS[:1])
        return RUNS

    monkeypatch.setattr(warmstart, "run_warmstart", run)
    out, table = tmp_path / "ws.json", tmp_path / "ws.md"
    argv = ["--torch-versions", "2.9", "--workloads", "mlp,", "--rounds", "3", "--cold-rounds",
            "2", "--budget-s", "60", "--json", str(out), "--markdown", str(table)]  # fmt: skip
    assert warmstart.main(argv) == 0

    assert seen == [
        warmstart.WarmOptions(
            versions=("2.9",), workloads=("mlp",), rounds=3, cold_rounds=2, budget_s=60.0
        )
    ]
    data = json.loads(out.read_text())
    assert data["runs"] == RUNS and data["rows"] == warmstart.fold(RUNS)
    assert data["conditions"]["options"]["rounds"] == 3
    assert {"started", "commit", "cpus", "load_bound", "last_run_ended"} <= set(data["conditions"])
    assert table.read_text() == warmstart.markdown_table(data)
    assert capsys.readouterr().out.strip() == warmstart.markdown_table(data).strip()


def test_python_dash_m_runs_the_command_line() -> None:
    done = subprocess.run(
        [sys.executable, "-m", "trcomp_bench.warmstart", "--help"],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    assert "Warm starts per torch version" in done.stdout and "--torch-versions" in done.stdout


def test_the_module_keeps_its_public_names() -> None:
    """Callers (doctables, the docs, scripts) import these from trcomp_bench.warmstart."""
    assert warmstart.run_warmstart is warmstart_run.run_warmstart
    assert warmstart.run_env is warmstart_run.run_env
    assert warmstart.fold is warmstart_table.fold
    assert warmstart.markdown_table is warmstart_table.markdown_table
    assert set(warmstart.__all__) >= {
        "AOT_KINDS", "KINDS", "NO_AOT", "WarmOptions", "fold", "has_aot", "main",
        "markdown_table", "run_env", "run_warmstart",
    }  # fmt: skip
