"""The per-rank record: what the hook writes reads back to the same JSON, key for key."""

from __future__ import annotations

import json
from typing import Any

import pytest

from trcomp_container.inprocess import record as rank_record
from trcomp_container.inprocess.record import (
    AutoCompileReport,
    CompileReport,
    ErrorReport,
    ModuleAot,
    ModuleReport,
    RankRecord,
    SpeedupDecision,
    SpeedupReport,
)

HEAD = {
    "rank": 1,
    "local_rank": 1,
    "pid": 4242,
    "backend": "inductor",
    "wall_s": 31.5021,
    "steps": 20,
    "first_step_s": 12.25,
    "step_intervals_s": [0.5, 0.25, 0.125, 0.125],
    "step_clock": "cuda-events",
    "error": None,
    "warnings": ["inductor option no_such_option=1 was not applied: bad"],
    "versions": {"torch": "2.14.0", "transformers": "4.57.0"},
}
AOT_SAVED = {
    "path": "saved",
    "reason": None,
    "key": "3f2a9c",
    "seconds": 4.5,
    "calls": 18,
    "other_calls": 1,
    "stale": ["model.py lines 10-12 changed since the artifact was saved"],
    "discarded_graphs": 0,
}
MODULE = {
    "module": "GPT2LMHeadModel",
    "parameters": 124439808,
    "by": "trcomp",
    "failed": None,
    "regional": "12 x GPT2Block",
    "regional_off": None,
    "calls": 20,
    "eager_calls": 0,
    "ran_compiled": True,
    "limit": None,
    "recompiled": None,
    "graphs_seen": 3,
    "verified": True,
    "verified_calls": 1,
    "verify_s": 0.5,
    "verify_compile_s": 12.5,
    "unchecked_reason": None,
    "double_backwards": 0,
    "rechecks": 1,
    "unchecked_graphs": 0,
    "block_of": None,
    "aot": AOT_SAVED,
    "state": "compiled_verified",
}
AUTOCOMPILE = {
    "modules": [
        MODULE,
        {
            **MODULE,
            "module": "DDP(Net)",
            "failed": "Unsupported: call_function UserDefinedObjectVariable",
            "regional": None,
            "regional_off": "no repeated blocks",
            "eager_calls": 3,
            "ran_compiled": False,
            "limit": "recompile_limit (8): size mismatch at index 0",
            "recompiled": "requires_grad of its parameters changed",
            "aot": {"path": "off", "reason": "torch 2.9 has no aot_compile"},
            "state": "eager_by_verdict",
        },
        {**MODULE, "module": "Head", "aot": None},
    ],
    "script_compiled": ["Critic"],
    "skipped": {"CrossEntropyLoss": "no trainable parameters"},
    "error": None,
}
DECISION = {
    "keep": "compiled",
    "eager_step_s": 0.2,
    "compiled_step_s": 0.125,
    "speedup": 1.6,
    "reason": "compiled is 1.60x faster",
    "source": "measured",
}
SPEEDUP = {
    "decision": DECISION,
    "compiled_steps": [4, 5, 6, 7, 12, 13, 14, 15],
    "eager_steps": [8, 9, 10, 11],
    "not_measured": None,
    "cost_s": 0.3,
    "cost_share": 0.009523,
}
COMPILE = {
    "time_s": 18.2631,
    "events": 3,
    "recompiles": 1,
    "graphs": 2,
    "graph_breaks": 1,
    "graph_break_reasons": {"print() is not supported": 1},
    "cache": {"fxgraph_hit": 2, "fxgraph_miss": 1, "aotautograd_hit": 0, "aotautograd_miss": 3},
    "aot": {"events": 1, "seconds": 4.5, "loaded": 0, "saved": 1, "discarded_graphs": 0},
}
XLA = {
    "compiles": 4,
    "compile_time_s": 1.5,
    "compiles_after_warmup": 0,
    "counters": {"PersistentCacheDeserializeFailure": 2, "aten::nonzero": 1},
}
JAX = {
    "programs_compiled": 3,
    "compile_time_s": 6.5,
    "calls": 30,
    "recompiles_after_warmup": 1,
    "programs_from_cache": 2,
    "devices": 8,
    "split_inputs": 2,
    "cache_hits": 5,
    "cache_misses": 1,
}

RECORDS: dict[str, dict[str, Any]] = {
    # The zero-code path under inductor, every part filled in.
    "inductor": {
        **HEAD,
        "autocompile": AUTOCOMPILE,
        "speedup": SPEEDUP,
        "compile": COMPILE,
        "xla": None,
        "jax": None,
    },
    # A stored keep-eager decision: the measurement's steps are empty, its cost null.
    "stored eager": {
        **HEAD,
        "autocompile": None,
        "speedup": {
            "decision": {**DECISION, "keep": "eager", "speedup": 0.8, "source": "stored"},
            "compiled_steps": [],
            "eager_steps": [],
            "not_measured": None,
            "cost_s": None,
            "cost_share": None,
        },
        "compile": {**COMPILE, "aot": None},
        "xla": None,
        "jax": None,
    },
    # The switch could not measure: the short form of speedup.
    "torch-xla": {
        **HEAD,
        "backend": "xla",
        "autocompile": None,
        "speedup": {"decision": None, "not_measured": "torch-xla traces lazily"},
        "compile": {k: v for k, v in COMPILE.items() if k != "cache"} | {"aot": None},
        "xla": XLA,
        "jax": None,
    },
    "jax": {
        **HEAD,
        "backend": "xla",
        "autocompile": None,
        "speedup": {"decision": None, "not_measured": "the jax engine runs compile_step"},
        "compile": {**COMPILE, "aot": None},
        "xla": None,
        "jax": JAX,
    },
    # The compiler off: no switch, so no autocompile or speedup key at all.
    "eager, failed": {
        **HEAD,
        "backend": "eager",
        "first_step_s": None,
        "step_intervals_s": [],
        "error": {
            "type": "KeyError",
            "message": "missing column 'label'",
            "traceback_tail": "Traceback (most recent call last):\n  ...\nKeyError: 'label'",
        },
        "compile": {
            "time_s": 0.0,
            "events": 0,
            "recompiles": 0,
            "graphs": 0,
            "graph_breaks": 0,
            "graph_break_reasons": {},
            "aot": None,
        },
        "xla": None,
        "jax": None,
    },
    # The hook failed while reporting: the parts it did not reach are left out.
    "hook error in compile_report": {**HEAD, "hook_error": "KeyError: 'stats'"},
    "hook error in xla_report": {
        **HEAD,
        "autocompile": AUTOCOMPILE,
        "speedup": SPEEDUP,
        "compile": COMPILE,
        "hook_error": "RuntimeError: no metric",
    },
    "hook error after the reports": {
        **HEAD,
        "compile": COMPILE,
        "xla": XLA,
        "jax": JAX,
        "hook_error": "OSError: [Errno 28] No space left on device",
    },
}


@pytest.mark.parametrize("name", RECORDS)
def test_every_record_reads_back_to_the_same_json(name: str) -> None:
    body = RECORDS[name]
    again = RankRecord.from_json(body).to_json()
    assert again == body
    # The same file, byte for byte: the keys in the order the hook writes them.
    assert json.dumps(again, indent=1) == json.dumps(body, indent=1)


def test_the_parts_read_as_typed_objects() -> None:
    record = RankRecord.from_json(RECORDS["inductor"])
    assert record.autocompile is not None and record.speedup is not None
    first, failed, head = record.autocompile.modules
    assert first.aot is not None and first.aot.path == "saved" and first.aot.calls == 18
    assert failed.aot == ModuleAot(path="off", reason="torch 2.9 has no aot_compile")
    assert not failed.aot.has_details and head.aot is None
    assert record.speedup.decision is not None and record.speedup.decision.speedup == 1.6
    assert record.compile is not None and record.compile.cache is not None
    assert record.compile.cache.fxgraph_miss == 1 and record.compile.aot is not None
    assert record.compile.aot.saved == 1


def test_a_record_built_by_keyword_writes_what_the_hook_wrote() -> None:
    record = RankRecord(
        **HEAD,
        autocompile=AutoCompileReport(
            modules=[ModuleReport.from_json(module) for module in AUTOCOMPILE["modules"]],
            script_compiled=["Critic"],
            skipped={"CrossEntropyLoss": "no trainable parameters"},
        ),
        speedup=SpeedupReport(
            decision=SpeedupDecision(**DECISION),
            compiled_steps=[4, 5, 6, 7, 12, 13, 14, 15],
            eager_steps=[8, 9, 10, 11],
            cost_s=0.3,
            cost_share=0.009523,
        ),
        compile=CompileReport.from_json(COMPILE),
    )
    assert record.to_json() == RECORDS["inductor"]


def test_records_without_the_optional_parts_read_with_defaults() -> None:
    # An older record: no local_rank, backend, wall_s, versions, compile or speedup.
    old = RankRecord.from_json({"rank": 2, "pid": 7, "steps": 3, "step_intervals_s": [0.1]})
    assert (old.rank, old.local_rank, old.backend, old.step_clock) == (2, 0, "eager", "cpu")
    assert old.compile is None and old.autocompile is None and old.speedup is None
    assert old.error is None and old.versions == {} and old.warnings == []
    # A module report and an error from before their optional keys existed.
    module = ModuleReport.from_json({"module": "Net", "calls": 4})
    assert module.aot is None and module.regional_off is None and module.limit is None
    assert module.recompiled is None and module.ran_compiled is False
    assert ErrorReport.from_json({"type": "ValueError", "message": "bad"}).traceback_tail == ""
    # Defaults write the hook's shape: a record with no switch has no autocompile key.
    assert "autocompile" not in RankRecord(rank=0, pid=1).to_json()
    assert RankRecord(speedup=SpeedupReport(not_measured="x")).to_json()["autocompile"] is None


def test_a_part_that_is_not_an_object_is_refused() -> None:
    with pytest.raises(ValueError, match="'compile' is a list"):
        RankRecord.from_json({"rank": 0, "compile": [1]})
    with pytest.raises(ValueError, match="not a JSON object"):
        RankRecord.from_json([1, 2])  # type: ignore[arg-type]


def test_write_and_read_use_the_hooks_file_name_and_format(tmp_path) -> None:
    record = RankRecord.from_json(RECORDS["inductor"])
    path = record.write(tmp_path / "ranks")
    assert path.name == "rank1-pid4242.json" and path.match(rank_record.RECORD_GLOB)
    assert path.read_text() == json.dumps(RECORDS["inductor"], indent=1)
    assert rank_record.read(path) == record
