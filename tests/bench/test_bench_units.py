"""Pure parts of the benchmark: backend environments, rows, tables, chart, LR scaling."""

from __future__ import annotations

import json
import subprocess
import sys
from dataclasses import asdict, replace
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from trcomp.contract.runtime_config import RuntimeConfig
from trcomp_bench.backends import BACKENDS, backend_env, get_backend
from trcomp_bench.batchsize import scale_learning_rate, search_max_batch_size
from trcomp_bench.results import (
    ROW_KEYS,
    Row,
    markdown_table,
    plot,
    read_json,
    table,
    write_json,
)
from trcomp_bench.worker import RunSpec

ISSUE_KEYS = [
    "workload", "backend", "device", "batch_size", "first_step_cold_s", "first_step_warm_s",
    "step_s", "samples_per_s", "peak_mem_mb", "max_loss_diff",
]  # fmt: skip
SHARED_ROUND_KEYS = ["first_step_shared_s", "shared_read"]  # issue 19: warm from a shared cache
ROUNDS_KEYS = ["round_step_s", "round_load", "vs_eager_rounds", "unreliable"]  # issue 25


def _row(backend: str, step_s: float, workload: str = "gpt2") -> Row:
    return Row(workload, backend, "cpu:2t", 8, 20.0, 6.0, step_s, 8 / step_s, 900.0, 1e-6)


def test_importing_the_bench_does_not_import_torch() -> None:
    code = (
        "import sys, trcomp_bench, trcomp_bench.cli, trcomp_bench.harness, "
        "trcomp_bench.batchsize, trcomp_bench.gpu_h200, trcomp_bench.workloads, "
        "trcomp_bench.shared_round; "
        "heavy = [m for m in ('torch', 'torch_xla', 'transformers', 'matplotlib') "
        "if m in sys.modules]; print(heavy); sys.exit(1 if heavy else 0)"
    )
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert proc.returncode == 0, proc.stdout + proc.stderr


def test_importing_trcomp_does_not_import_the_bench() -> None:
    code = (
        "import sys, trcomp, trcomp.runtime, trcomp.cli; "
        "sys.exit(1 if 'trcomp_bench' in sys.modules else 0)"
    )
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert proc.returncode == 0, proc.stdout + proc.stderr


def test_row_keys_are_exactly_the_issue_keys(tmp_path: Path) -> None:
    keys = ISSUE_KEYS + SHARED_ROUND_KEYS + ROUNDS_KEYS
    assert list(ROW_KEYS) == keys
    shared = replace(
        _row("inductor", 0.02, "mlp"),
        first_step_shared_s=7.5,
        shared_read={"entries": 1, "files": 4, "bytes": 900},
        round_step_s=[0.021, 0.019],
        round_load=[[1.5, 1.75], [None, 2.0]],
        vs_eager_rounds=[1.4, 1.6],
        unreliable="rounds disagree (1.40x to 1.60x, bound 10%): ratios unreliable",
    )
    rows = [_row("eager", 0.03), _row("inductor", 0.02), shared]
    write_json(rows, tmp_path / "out" / "rows.json")
    loaded = json.loads((tmp_path / "out" / "rows.json").read_text())
    assert [list(item) for item in loaded] == [keys, keys, keys]
    assert read_json(tmp_path / "out" / "rows.json") == rows
    with pytest.raises(ValueError, match="exactly the keys"):
        Row.from_dict({**loaded[0], "extra": 1})
    with pytest.raises(ValueError, match="exactly the keys"):
        Row.from_dict({k: v for k, v in loaded[0].items() if k != "step_s"})


def test_rows_written_before_the_shared_round_read_and_render_as_before() -> None:
    old = asdict(_row("inductor", 0.02))
    for name in SHARED_ROUND_KEYS + ROUNDS_KEYS:
        del old[name]
    row = Row.from_dict(old)
    assert row.first_step_shared_s is None and row.shared_read is None
    table = markdown_table([_row("eager", 0.03), row])
    assert table.splitlines()[0] == (
        "| workload | backend | device | batch | first step cold (s) | first step warm (s) "
        "| step (ms) | samples/s | vs eager | peak mem (MiB) | max loss diff |"
    )
    assert table.splitlines()[3] == (
        "| gpt2 | inductor | cpu:2t | 8 | 20.00 | 6.00 | 20.0 | 400 | 1.50x | 900 | 1.0e-06 |"
    )


def test_rows_with_rounds_give_the_median_ratio_its_spread_the_load_and_the_flag() -> None:
    eager = replace(_row("eager", 0.03), round_step_s=[0.03, 0.03], round_load=[[0.5, 0.75]] * 2)
    steady = replace(
        _row("inductor", 0.02),
        round_step_s=[0.02, 0.021],
        round_load=[[0.6, 1.0], [1.1, 0.9]],
        vs_eager_rounds=[1.4, 1.6, 1.5],
    )
    busy = replace(
        _row("inductor", 0.02, "mlp"),
        round_step_s=[0.02, 0.02],
        round_load=[[1.0, 6.5], [6.0, 5.0]],
        vs_eager_rounds=[7.85, 0.95],
        unreliable="load changed (1.0 to 6.5, bound 2): ratios unreliable",
    )
    lines = markdown_table([eager, steady, busy]).splitlines()
    assert lines[0] == (
        "| workload | backend | device | batch | first step cold (s) | first step warm (s) "
        "| step (ms) | samples/s | vs eager | vs eager, rounds min-max (n) | peak mem (MiB) "
        "| max loss diff | load avg (1 min) | ratios |"
    )
    assert lines[2].endswith("| 1.00x | n/a | 900 | 1.0e-06 | 0.5-0.8 | ok |")
    # The median of the rounds' ratios (1.5), not eager's pooled step over this one's.
    assert lines[3].endswith("| 1.50x | 1.40-1.60x (3) | 900 | 1.0e-06 | 0.6-1.1 | ok |")
    # No eager row for mlp: the rounds' ratios still give the ratio; the flag is shown.
    assert lines[4].endswith(
        "| 4.40x | 0.95-7.85x (2) | 900 | 1.0e-06 | 1.0-6.5 "
        "| load changed (1.0 to 6.5, bound 2): ratios unreliable |"
    )
    assert busy.vs_eager(None) == pytest.approx((7.85 + 0.95) / 2)


def test_the_shared_column_comes_after_the_warm_one() -> None:
    shared = replace(_row("inductor", 0.02), first_step_shared_s=7.25, shared_read={"files": 4})
    lines = markdown_table([_row("eager", 0.03), shared]).splitlines()
    assert "| first step warm (s) | first step warm, shared (s) | step (ms) |" in lines[0]
    assert lines[2].startswith("| gpt2 | eager | cpu:2t | 8 | 20.00 | 6.00 | n/a | 30.0 |")
    assert lines[3].startswith("| gpt2 | inductor | cpu:2t | 8 | 20.00 | 6.00 | 7.25 | 20.0 |")


def test_one_table_writer() -> None:
    assert (
        table(("a", "b"), [(1, "x"), ("2", None)])
        == "| a | b |\n|---|---|\n| 1 | x |\n| 2 | None |\n"
    )
    assert table(("a",), []) == "| a |\n|---|\n"


def test_markdown_table_gives_the_ratio_against_eager() -> None:
    table = markdown_table([_row("eager", 0.030), _row("inductor", 0.020), _row("xla", 0.060)])
    lines = table.splitlines()
    assert lines[0].startswith("| workload | backend |") and len(lines) == 5
    assert "| 1.50x |" in lines[3] and "| 0.50x |" in lines[4]
    assert "n/a" in markdown_table([_row("inductor", 0.02)])  # no eager row, no ratio


def test_plot_writes_a_small_png(tmp_path: Path) -> None:
    rows = [_row("eager", 0.03), _row("inductor", 0.02), _row("eager", 0.01, "mlp")]
    labels = plot(rows, tmp_path / "chart.png")
    data = (tmp_path / "chart.png").read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n" and len(data) < 200_000
    assert labels == ["eager cold", "eager warm", "inductor cold", "inductor warm"]


def test_plot_shows_the_shared_round_where_it_ran(tmp_path: Path) -> None:
    shared = replace(_row("inductor", 0.02), first_step_shared_s=5.0)
    labels = plot([_row("eager", 0.03), shared], tmp_path / "chart.png")
    assert labels == [
        "eager cold",
        "eager warm",
        "inductor cold",
        "inductor warm",
        "inductor shared",
    ]


def test_backend_env_cold_and_warm_share_nothing_but_the_cache_dir(tmp_path: Path) -> None:
    base = {"PATH": "/bin", "PJRT_DEVICE": "CPU", "USE_TORCH_XLA": "1"}
    inductor = backend_env("inductor", tmp_path / "a", base)
    assert inductor["USE_TORCH_XLA"] == "0" and "PJRT_DEVICE" not in inductor
    assert inductor["TORCHINDUCTOR_CACHE_DIR"] == str(tmp_path / "a" / "inductor")
    assert RuntimeConfig.from_env(inductor) == RuntimeConfig(
        enabled=True, backend="inductor", engine="inductor"
    )
    xla = backend_env("xla", tmp_path / "b", {"PATH": "/bin"})
    assert xla["PJRT_DEVICE"] == "CPU" and xla["USE_TORCH_XLA"] == "1"
    assert xla["XLA_PERSISTENT_CACHE_PATH"] == str(tmp_path / "b" / "xla")
    eager = RuntimeConfig.from_env(backend_env("eager", tmp_path, base))
    assert eager == RuntimeConfig(enabled=False, backend=None)
    tuned = RuntimeConfig.from_env(backend_env("inductor-max-autotune", tmp_path, base))
    assert tuned.mode == "max-autotune"
    assert base == {"PATH": "/bin", "PJRT_DEVICE": "CPU", "USE_TORCH_XLA": "1"}
    assert set(BACKENDS) >= {"eager", "inductor", "xla"}
    with pytest.raises(ValueError, match="use one of eager"):
        get_backend("tvm")


def test_backend_env_for_the_jax_engine(tmp_path: Path) -> None:
    jax = backend_env("jax", tmp_path / "c", {"PATH": "/bin", "PJRT_DEVICE": "CPU"})
    assert RuntimeConfig.from_env(jax) == RuntimeConfig(enabled=True, backend="xla", engine="jax")
    assert jax["USE_TORCH_XLA"] == "0" and "PJRT_DEVICE" not in jax
    assert jax["JAX_COMPILATION_CACHE_DIR"] == str(tmp_path / "c" / "jax")
    assert jax["JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS"] == "0"


def test_run_spec_round_trips_through_json() -> None:
    spec = RunSpec(backend="xla", batch_size=4, workload="bert", size="tiny", steps=3)
    assert RunSpec.from_json(spec.to_json()) == spec


def test_learning_rate_scaling() -> None:
    assert scale_learning_rate(1e-3, 8, 32) == pytest.approx(4e-3)
    assert scale_learning_rate(1e-3, 8, 32, "sqrt") == pytest.approx(2e-3)
    assert scale_learning_rate(1e-3, 8, 8, "sqrt") == pytest.approx(1e-3)
    with pytest.raises(ValueError, match="'linear' or 'sqrt'"):
        scale_learning_rate(1e-3, 8, 32, "cubic")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="positive"):
        scale_learning_rate(1e-3, 0, 32)


@given(
    largest=st.integers(min_value=0, max_value=3000),
    start=st.integers(min_value=1, max_value=64),
    limit=st.integers(min_value=64, max_value=4096),
)
def test_search_finds_the_largest_fitting_batch(largest: int, start: int, limit: int) -> None:
    tried: list[int] = []

    def fits(batch: int) -> bool:
        tried.append(batch)
        return batch <= largest

    found = search_max_batch_size(fits, start=start, limit=limit)
    expected = min(largest, limit) if largest >= start else 0
    assert found == expected
    assert all(start <= b <= limit for b in tried)
    assert len(tried) <= 2 * (limit.bit_length() + 1)  # logarithmic, not a scan
