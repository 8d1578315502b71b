"""Aggregation of per-rank records into summary.json and the metric lines."""

from __future__ import annotations

import json

from trcomp.contract.metrics import parse_metrics
from trcomp_container.inprocess.record import RankRecord
from trcomp_container.summary import (
    build_summary,
    metric_lines,
    read_rank_records,
    render_block,
    speedup_line,
    steady_step_time,
)


def body(rank, steps, intervals, compile_s=2.0, graphs=3, pid=1, **extra):
    """A rank record's JSON, as the hook writes it."""
    return {
        "rank": rank,
        "pid": pid,
        "steps": steps,
        "first_step_s": 10.0 + rank,
        "step_intervals_s": intervals,
        "compile": {
            "time_s": compile_s,
            "graphs": graphs,
            "recompiles": rank,
            "graph_breaks": 1,
            "events": 2,
            "graph_break_reasons": {"print": 1},
        },
        "xla": None,
        "error": None,
        "versions": {"torch": "2.9.0"},
        **extra,
    }


def record(*args, **kwargs) -> RankRecord:
    return RankRecord.from_json(body(*args, **kwargs))


def test_steady_step_time_skips_warm_up():
    assert steady_step_time([9.0, 5.0, 1.0, 1.0, 1.0, 2.0]) == 1.0
    assert steady_step_time([]) is None


def test_one_record_per_rank_prefers_the_process_that_stepped(tmp_path):
    (tmp_path / "rank0-pid1.json").write_text(json.dumps(body(0, 0, [], pid=1)))
    (tmp_path / "rank0-pid2.json").write_text(json.dumps(body(0, 5, [0.1] * 4, pid=2)))
    (tmp_path / "rank1-pid3.json").write_text(json.dumps(body(1, 5, [0.2] * 4, pid=3)))
    (tmp_path / "rank2-pid4.json").write_text("{not json")
    (tmp_path / "rank3-pid5.json").write_text(json.dumps({"rank": 3, "compile": [1]}))
    records = read_rank_records(tmp_path)
    assert [(r.rank, r.pid) for r in records] == [(0, 2), (1, 3)]
    assert records[0] == RankRecord.from_json(body(0, 5, [0.1] * 4, pid=2))


def test_summary_reports_the_slowest_rank_and_lines_parse_back():
    records = [record(0, 5, [0.1] * 6, compile_s=2.0), record(1, 5, [0.2] * 6, compile_s=3.0)]
    summary = build_summary(records, job={"backend": "inductor"}, warnings=["w"])
    metrics = summary["metrics"]
    assert metrics["compile_time_s"] == 3.0
    assert metrics["step_time_s"] == 0.2
    assert metrics["recompiles"] == 1
    assert metrics["first_step_s"] == 11.0
    assert summary["backend"] == "inductor" and summary["warnings"] == ["w"]
    assert summary["ranks"][0]["graph_break_reasons"] == {"print": 1}
    parsed = parse_metrics("\n".join(metric_lines(summary)))
    assert parsed["graphs_compiled"] == 3 and abs(parsed["steps_per_s"] - 5.0) < 1e-6
    assert "trcomp summary" in render_block(summary)


def test_xla_records_use_xla_compile_counts():
    xla = {"compiles": 4, "compile_time_s": 1.5, "compiles_after_warmup": 0, "counters": {}}
    summary = build_summary([record(0, 3, [0.1, 0.1], xla=xla)], job={})
    assert summary["metrics"]["graphs_compiled"] == 4
    assert summary["metrics"]["graph_breaks"] == 0


def test_no_records_gives_empty_metrics():
    summary = build_summary([], job={"backend": None})
    assert summary["metrics"] == {} and metric_lines(summary) == []
    assert "eager" in render_block(summary)


def test_unreadable_xla_cache_becomes_a_warning():
    xla = {
        "compiles": 2,
        "compile_time_s": 1.0,
        "compiles_after_warmup": 0,
        "counters": {"PersistentCacheDeserializeFailure": 2},
    }
    summary = build_summary([record(0, 3, [0.1, 0.1], xla=xla)], job={}, warnings=["first"])
    assert summary["warnings"][0] == "first"
    assert "persistent cache" in summary["warnings"][1]


def test_jax_engine_records_use_the_step_program_counts():
    jax = {
        "programs_compiled": 3,
        "compile_time_s": 6.5,
        "recompiles_after_warmup": 1,
        "programs_from_cache": 2,
        "calls": 30,
        "cache_hits": 5,
        "cache_misses": 1,
    }
    summary = build_summary(
        [record(0, 30, [0.1] * 10, jax=jax)], job={"backend": "xla", "engine": "jax"}
    )
    metrics = summary["metrics"]
    assert (metrics["graphs_compiled"], metrics["recompiles"]) == (3, 1)
    assert metrics["compile_time_s"] == 6.5 and metrics["graph_breaks"] == 0
    assert summary["engine"] == "jax" and summary["ranks"][0]["jax"] == jax
    assert "xla on the jax engine" in render_block(summary)
    assert parse_metrics("\n".join(metric_lines(summary)))["graphs_compiled"] == 3


def test_the_printed_speedup_says_when_it_was_too_noisy_to_decide():
    noisy = {
        "kept": "compiled",
        "speedup_vs_eager": 0.6,
        "compiled_step_s": 0.05,
        "eager_step_s": 0.03,
        "source": "measured",
        "reason": "too noisy to decide: the compiled steps ran 40.00 ms before and 60.00 ms "
        "after the eager ones (30.00 ms), more than 20% apart: kept compiling",
    }
    line = speedup_line(noisy)
    assert line.startswith("0.60x vs eager") and "(too noisy to decide)" in line
    assert "too noisy" not in speedup_line({**noisy, "reason": "compiled steps ran 0.60x"})


def test_the_summary_says_what_checking_against_eager_found_and_cost():
    module = {"module": "Net", "parameters": 10, "calls": 5, "ran_compiled": True}
    checked = {
        **module,
        "verified": True,
        "verified_calls": 3,
        "verify_s": 21.43,
        "rechecks": 1,
        "unchecked_graphs": 1,
    }
    kept = {
        **module,
        "module": "Critic",
        "by": "trcomp.runtime.compile",
        "failed": "verification: the gradient of b.weight differs by 0.02",
        "ran_compiled": False,
        "verified": False,
        "verified_calls": 1,
        "verify_s": 3.0,
    }
    runtime = {**module, "module": "Head", "by": "trcomp.runtime.compile"}
    auto = {"modules": [checked, kept, runtime]}
    summary = build_summary(
        [record(0, 30, [0.1] * 10, autocompile=auto)], job={"backend": "inductor"}
    )
    assert summary["verified"] == (
        "Net matched eager (3 graphs checked on copies, 21.4 s; 1 later graph checked too; 1 "
        "graph unchecked (a job of several ranks: a verdict round on one rank)); Critic kept "
        "eager (1 graph checked on copies, 3.0 s): the gradient of b.weight differs by 0.02"
    )
    assert summary["compiled"] == (
        "Net (by trcomp, no code change), Critic (kept eager by its check), "
        "Head (by the script, through trcomp.runtime.compile); 3 graphs"
    )
    assert f"verified       {summary['verified']}" in render_block(summary)
    unchecked = build_summary([record(0, 30, [0.1] * 10)], job={"backend": "inductor"})
    assert unchecked["verified"] is None and "verified " not in render_block(unchecked)


def test_a_module_whose_graphs_hold_none_of_its_computation_is_not_called_compiled():
    limit = "recompile_limit (8) in <lambda> (train.py:24): 2/7: len(G['kept']) == 14"
    hooked = {
        "module": "Sequential",
        "calls": 9,
        "ran_compiled": False,
        "graphs_seen": 0,
        "limit": limit,
    }
    inside = {**hooked, "module": "Net", "ran_compiled": True, "graphs_seen": 3}
    summary = build_summary(
        [record(0, 16, [0.1] * 10, autocompile={"modules": [hooked, inside]})],
        job={"backend": "inductor"},
    )
    assert summary["compiled"].startswith(
        "Sequential (compiled by trcomp but ran eager at the end), Net (by trcomp"
    )
    hooked_warning, inside_warning = summary["warnings"]
    assert hooked_warning.startswith(
        "Sequential was compiled, but none of its computation ran compiled: dynamo broke "
        "the graph before any of it"
    )
    assert "recompile_limit (8) in <lambda> (train.py:24)" in hooked_warning
    assert "a Python value" in hooked_warning  # the real cause, not the input shapes
    assert inside_warning.startswith("Net was compiled, but dynamo hit its recompile_limit")


def test_the_summary_names_fsdp2_blocks_of_one_model_as_one_group():
    def block(index: int, **more) -> dict:
        return {
            "module": f"FSDPNet.blocks.{index}",
            "parameters": 304,
            "calls": 9,
            "ran_compiled": True,
            "verified": True,
            "verified_calls": 2,
            "verify_s": 1.0,
            "block_of": "FSDPNet",
            **more,
        }

    failed = {"failed": "verification: output 0 differs", "ran_compiled": False, "verified": False}
    auto = {"modules": [block(0), block(1), block(2), block(3, **failed)]}
    summary = build_summary(
        [record(0, 30, [0.1] * 10, autocompile=auto)], job={"backend": "inductor"}
    )
    assert summary["compiled"] == (
        "3 FSDP2 blocks of FSDPNet (by trcomp, no code change), "
        "FSDPNet.blocks.3 (kept eager by its check); 3 graphs"
    )
    assert summary["verified"] == (
        "3 FSDP2 blocks of FSDPNet matched eager (2 graphs checked on copies each, 3.0 s in all); "
        "FSDPNet.blocks.3 kept eager (2 graphs checked on copies, 1.0 s): output 0 differs"
    )


def test_the_summary_says_per_rank_whether_it_compiled_or_loaded_and_the_first_step_skew():
    first = body(0, 5, [0.1] * 6, compile_s=31.4)
    other = body(1, 5, [0.1] * 6, compile_s=15.3)
    first["compile"]["cache"] = {"fxgraph_hit": 0, "fxgraph_miss": 4}
    other["compile"]["cache"] = {"fxgraph_hit": 4, "fxgraph_miss": 0}
    other["compile"]["turns"] = {
        "role": "after the host's first rank",
        "waited": 4,
        "waited_s": 28.77,
    }
    records = [RankRecord.from_json(first), RankRecord.from_json(other)]
    summary = build_summary(records, job={"backend": "inductor"})
    assert summary["first_step_skew_s"] == 1.0  # 10 s and 11 s
    assert summary["by_rank"] == (
        "rank 0: 0 of 4 inductor graphs from the cache, compiling 31.4 s, first step at 10.0 s; "
        "rank 1: 4 of 4 inductor graphs from the cache after waiting 28.8 s for the host's "
        "first rank, compiling 15.3 s, first step at 11.0 s; first-step skew 1.00 s"
    )
    assert f"by rank        {summary['by_rank']}" in render_block(summary)
    one = build_summary(records[:1], job={"backend": "inductor"})
    assert one["by_rank"] is None and one["first_step_skew_s"] is None


def test_no_speedup_figure_or_kept_compiled_where_no_compiled_code_ran():
    # A record whose measurement compared eager with eager (the check kept the module
    # eager): the summary says so, never "1.15x ... kept compiled".
    kept_eager = {
        "module": "ResNet",
        "calls": 0,
        "ran_compiled": False,
        "failed": "verification: output 0 differs by 0.3",
        "verified": False,
        "verified_calls": 2,
        "verify_s": 1.0,
    }
    speedup = {
        "decision": {
            "keep": "compiled",
            "speedup": 1.15,
            "eager_step_s": 0.23,
            "compiled_step_s": 0.2,
            "reason": "compiled steps ran 1.15x of eager",
        },
        "compiled_steps": [4, 5, 6, 7, 12, 13, 14, 15],
        "eager_steps": [8, 9, 10, 11],
    }
    summary = build_summary(
        [record(0, 30, [0.1] * 20, autocompile={"modules": [kept_eager]}, speedup=speedup)],
        job={"backend": "inductor"},
    )
    assert summary["speedup"]["speedup_vs_eager"] is None and summary["speedup"]["kept"] is None
    assert summary["speedup"]["reason"].startswith("no compiled code ran")
    assert "ResNet: verification: output 0 differs" in summary["speedup"]["reason"]
    block = render_block(summary)
    assert "kept compiled" not in block and "1.15x" not in block
    assert "speedup_vs_eager" not in summary["metrics"]
    assert "eager_step_s" not in summary["metrics"]
    assert "speedup_vs_eager" not in "\n".join(metric_lines(summary))
    (warning,) = [w for w in summary["warnings"] if "no compiled code ran" in w]
    assert warning.startswith("the compiler was on but no compiled code ran")


def test_the_verified_line_gives_the_checks_seconds_and_its_compile_apart():
    checked = {
        "module": "TinyLM",
        "calls": 5,
        "ran_compiled": True,
        "verified": True,
        "verified_calls": 2,
        "verify_s": 0.7,
        "verify_compile_s": 48.6,
        "state": "compiled_verified",
    }
    summary = build_summary(
        [record(0, 30, [0.1] * 10, autocompile={"modules": [checked]})],
        job={"backend": "inductor"},
    )
    assert summary["verified"] == (
        "TinyLM matched eager (2 graphs checked on copies, 0.7 s; "
        "compiling inside the check 48.6 s)"
    )
