"""The distributed rows (trcomp_bench.distributed): which jobs run, and what each row says.

The jobs themselves are real two-rank process-mode jobs in ``python -m
trcomp_bench.distributed``; two-rank FSDP2 and DDP under the default switch are
the corpus's ``fsdp2_two_ranks.py`` and ``ddp_two_ranks.py`` in ``make test``.
"""

from __future__ import annotations

import json

from trcomp_bench import distributed


def summary(kind_index: int) -> dict:
    """A two-rank job's summary.json, as the kind of job would write it."""
    compiled = kind_index > 0
    hits = {0: [0, 0], 1: [0, 0], 2: [0, 2], 3: [2, 2]}[kind_index]
    return {
        "metrics": {"step_time_s": 0.2 if compiled else 0.1},
        "first_step_skew_s": 0.5,
        "compiled": "2 FSDP2 blocks of FSDPGPT2LMHeadModel" if compiled else "nothing",
        "ranks": [
            {
                "compile_time_s": 40.0 - 20 * rank * (kind_index == 2) if compiled else None,
                "first_step_s": 50.0 + rank,
                "compile_cache": {"fxgraph_hit": hits[rank], "fxgraph_miss": 2 - hits[rank]},
            }
            for rank in (0, 1)
        ],
    }


def test_each_round_runs_the_four_jobs_and_the_rows_compare_them_with_the_off_job(
    tmp_path, monkeypatch
):
    ran = []

    def run_job(work, script, hyperparameters, config, *, checkpoints, **estimator):
        kind = int(work.name.rsplit("-", 1)[1])
        ran.append(
            (
                hyperparameters["wrap"],
                config.enabled,
                estimator["environment"],
                None if checkpoints is None else checkpoints.name,
            )
        )
        assert estimator["distribution"] == {"torch_distributed": {"enabled": True}}
        return summary(kind)

    monkeypatch.setattr(distributed, "run_job", run_job)
    out = tmp_path / "rows.json"
    assert distributed.main(["--wraps", "fsdp2", "--rounds", "1", "--json", str(out)]) == 0
    two = {"TRCOMP_NPROC_PER_NODE": "2"}
    # The cold job with turns and the warm one share a checkpoint location (its cache).
    assert ran == [
        ("fsdp2", False, two, None),
        ("fsdp2", True, {**two, "TRCOMP_COMPILE_TURNS": "0"}, None),
        ("fsdp2", True, two, "0-turns-checkpoints"),
        ("fsdp2", True, two, "0-turns-checkpoints"),
    ]
    table = json.loads(out.read_text())
    assert table["header"] == distributed.HEADER
    at_once, turns, warm = table["rows"]
    assert at_once == [
        "fsdp2, cold, ranks at once",
        "0.50x (0.50-0.50)",
        "50.0/51.0",
        "80.0",
        "40.0/40.0",
        "0.50",
        "0 of 2/0 of 2",
    ]
    assert turns[3:5] == ["60.0", "40.0/20.0"] and turns[6] == "0 of 2/2 of 2"
    assert warm[0] == "fsdp2, warm" and warm[6] == "2 of 2/2 of 2"
