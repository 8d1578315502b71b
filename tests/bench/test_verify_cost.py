"""The verification-cost benchmark (trcomp_bench.verify_cost) pairs jobs with verify on and off."""

from __future__ import annotations

import json

from trcomp_bench import verify_cost


def summary(verify: bool, compile_s: float) -> dict:
    module = {"verified": True, "verified_calls": 2, "verify_s": compile_s + 0.5}
    return {
        "duration_s": 10.0 + compile_s,
        "metrics": {"compile_time_s": compile_s, "first_step_s": compile_s + 1},
        # verify=False: no entry (a model compiled through trcomp.runtime is not adopted)
        "ranks": [{"autocompile": {"modules": [module] if verify else []}}],
    }


def test_each_round_runs_both_jobs_in_alternating_order_and_the_table_says_so(
    tmp_path, monkeypatch
):
    ran = []

    def run_job(work, script, hyperparameters, config):
        ran.append((hyperparameters["workload"], config.verify, "runtime.compile" in script))
        return summary(config.verify, 4.0 if config.verify else 3.0)

    monkeypatch.setattr(verify_cost, "run_job", run_job)
    out = tmp_path / "cost.json"
    assert verify_cost.main(["--rounds", "2", "--json", str(out)]) == 0
    # The demo's path (tiny_lm): the script compiles through trcomp.runtime.
    assert ran == [
        ("gpt2", True, False),
        ("gpt2", False, False),
        ("gpt2", False, False),
        ("gpt2", True, False),
        ("tiny_lm", True, True),
        ("tiny_lm", False, True),
        ("tiny_lm", False, True),
        ("tiny_lm", True, True),
    ]
    table = json.loads(out.read_text())
    gpt2 = table["rows"][0]
    assert len(gpt2) == len(table["header"])
    assert gpt2[1:] == [
        "2",
        "2 calls, 4.5 s (0.5 s more than compiling); 2 calls, 4.5 s (0.5 s more than compiling)",
        "4.0 / 3.0",
        "5.0 / 4.0",
        "14.0 / 13.0",
        "1.077",
    ]
