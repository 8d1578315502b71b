"""The random-numbers benchmark (trcomp_bench.random_cost) runs its three copies side by side."""

from __future__ import annotations

import json

import pytest

from trcomp_bench import random_cost

pytest.importorskip("torch")


def test_the_three_copies_are_timed_and_the_table_is_written(tmp_path, monkeypatch):
    real = random_cost.measure
    # aot_eager: the same three copies without inductor's code generation (seconds, not
    # minutes); the numbers are not asserted, only that each row was measured.
    monkeypatch.setattr(
        random_cost,
        "measure",
        lambda **kwargs: real(**{**kwargs, "backend": "aot_eager"}),
    )
    out = tmp_path / "random.json"
    argv = ["--width", "16", "--batch-size", "4", "--steps", "2", "--warmup", "1"]
    assert random_cost.main([*argv, "--json", str(out)]) == 0
    table = json.loads(out.read_text())
    (row,) = table["rows"]
    assert len(row) == len(table["header"]) == 7
    assert all(float(cell) > 0 for cell in row[2:])
