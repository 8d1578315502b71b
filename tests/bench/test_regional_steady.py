"""The interleaved steady-step tool of the regional rows, on a tiny GPT-2 (dynamo's aot_eager)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from trcomp_bench import regional_steady

pytestmark = pytest.mark.slow


def test_regional_whole_and_per_block_take_turns_and_are_reported(
    tmp_path: Path, clean_env: pytest.MonkeyPatch, one_thread: None
) -> None:
    clean_env.setenv("USE_TORCH_XLA", "0")
    real = regional_steady.measure
    # aot_eager: the same three copies and regions without inductor's code generation
    # (seconds, not minutes); the numbers are not asserted, only that each was measured.
    clean_env.setattr(regional_steady, "measure", lambda *a: real(*a, backend="aot_eager"))
    out = tmp_path / "steady.json"
    # Two timed steps: one in each order. One warm-up step (the compiling one) is enough
    # for a table that only has to be filled, and a batch of 2 for a tiny model.
    argv = ["--workload", "gpt2-2l", "--size", "tiny", "--steps", "2", "--warmup", "1"]
    argv += ["--batch-size", "2", "--json", str(out)]
    assert regional_steady.main(argv) == 0
    data = json.loads(out.read_text())
    (row,) = data["rows"]
    assert dict(zip(data["header"], row, strict=True))["regional blocks"] == "2 x GPT2Block"
    assert data["header"][-2:] == ["regional / whole", "per-block / whole"]
    assert all(float(value) > 0 for value in row[3:])
