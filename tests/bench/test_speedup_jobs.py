"""The reference workloads as jobs: the table and the bench's ratio beside the job's own."""

from __future__ import annotations

from trcomp_bench import speedup_jobs


def test_the_bench_ratio_is_eager_over_inductor_for_the_workload():
    bench = [
        {"workload": "cnn", "backend": "eager", "step_s": 0.084},
        {"workload": "cnn", "backend": "inductor", "step_s": 0.1},
        {"workload": "mlp", "backend": "eager", "step_s": 0.01},
    ]
    assert speedup_jobs.bench_ratio(bench, "cnn") == 0.84
    assert speedup_jobs.bench_ratio(bench, "mlp") is None  # no inductor row
    rounds = {"workload": "gpt2", "backend": "inductor", "step_s": 0.1}
    rounds["vs_eager_rounds"] = [0.9, 7.85, 0.95]  # the median round's, as the bench's table
    assert speedup_jobs.bench_ratio([*bench, rounds], "gpt2") == 0.95


def test_the_table_shows_what_each_job_kept_and_what_measuring_cost():
    row = {
        "workload": "cnn",
        "speedup_vs_eager": 0.8,
        "bench_ratio": 0.84,
        "kept": "eager",
        "eager_step_s": 0.08,
        "compiled_step_s": 0.1,
        "cost_s": 0.0,
        "cost_share": 0.0,
    }
    missing = dict.fromkeys(row, None) | {"workload": "gpt2"}
    text = speedup_jobs.markdown_table([row, missing])
    assert "| cnn | 0.80x | 0.84x | eager | 0.0800 | 0.1000 | 0.000 | 0.00% |" in text
    assert "| gpt2 | n/a | n/a | n/a |" in text


def test_the_job_script_compiles_nothing_itself():
    assert (
        "compile" not in speedup_jobs.JOB_SCRIPT and "trcomp import" not in speedup_jobs.JOB_SCRIPT
    )
