"""The verification-cost benchmark (trcomp_bench.verify_cost): off, unchecked and checked
jobs side by side, the order rotating between rounds."""

from __future__ import annotations

import json

from trcomp_bench import verify_cost


def summary(kind: str) -> dict:
    compile_s = {"off": 0.0, "unchecked": 3.0, "checked": 4.0}[kind]
    module = {"verified": True, "verified_calls": 1, "verify_s": 0.5, "verify_compile_s": 1.5}
    return {
        "duration_s": 10.0 + compile_s,
        "metrics": {"compile_time_s": compile_s, "first_step_s": compile_s + 1},
        # verify=False: no entry (a model compiled through trcomp.runtime is not adopted)
        "ranks": [{"autocompile": {"modules": [module] if kind == "checked" else []}}],
    }


def kind_of(config) -> str:
    if not config.enabled:
        return "off"
    return "checked" if config.verify else "unchecked"


def test_each_round_runs_the_three_jobs_in_rotating_order_and_the_table_says_so(
    tmp_path, monkeypatch
):
    ran = []

    def run_job(work, script, hyperparameters, config):
        ran.append((hyperparameters["workload"], kind_of(config), "runtime.compile" in script))
        return summary(kind_of(config))

    monkeypatch.setattr(verify_cost, "run_job", run_job)
    out = tmp_path / "cost.json"
    assert verify_cost.main(["--rounds", "2", "--json", str(out)]) == 0
    # The demo's path (tiny_lm): the script compiles through trcomp.runtime.
    assert ran[:6] == [
        ("gpt2", "off", False),
        ("gpt2", "unchecked", False),
        ("gpt2", "checked", False),
        ("gpt2", "unchecked", False),
        ("gpt2", "checked", False),
        ("gpt2", "off", False),
    ]
    assert [r[0] for r in ran[6:]] == ["tiny_lm"] * 6 + ["heavy"] * 6
    assert all(r[2] for r in ran[6:12]) and not any(r[2] for r in ran[12:])
    table = json.loads(out.read_text())
    gpt2 = table["rows"][0]
    assert len(gpt2) == len(table["header"])
    assert gpt2[1:] == [
        "2",
        "1 graphs, 0.50 s (+1.5 s compiling); 1 graphs, 0.50 s (+1.5 s compiling)",
        "3.6%",
        "0.0 / 3.0 / 4.0",
        "1.0 / 4.0 / 5.0",
        "10.0 / 13.0 / 14.0",
        "- / - / -",  # no job output to read the peak from: run_job is a stand-in here
        "-",
    ]


def test_the_scripts_record_their_peak_memory():
    for script in verify_cost.SCRIPTS.values():
        assert "peak.json" in script and "ru_maxrss" in script
    assert "ACTIVATIONS_MB" in verify_cost.HEAVY_SCRIPT
