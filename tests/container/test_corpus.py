"""Do no harm: every corpus script trains the same under the default switch as with it off.

Each script in tests/container/corpus/ is a pattern users write (its docstring
says which). It runs as a child process, in the environment the
container builds (``build_environment``, so the real start-up hook): forked from
the worker's zygote, a process that has already imported torch's compiler stack
(tests/helpers/zygote.py: the hook then starts as at start-up and runs its import
callbacks at once), or, for an environment the zygote was not started with, a new
process (two ranks: torchrun, its ranks forked by the session's fork server,
tests/helpers/forkserver.py); under the
default ``TrainingCompilerConfig()`` resolved for this CPU host (inductor), and
is held against its run with the compiler off. The off run is plain eager
PyTorch, so it is stored (tests/container/corpus_off/, made by ``make
corpus-off``, :mod:`tests.helpers.corpus_off`) and used while the script, its
helper and the torch, Python and transformers versions are the ones it was made
with; otherwise (a new or edited script, another torch) it runs live as well.
``test_the_stored_compiler_off_results_are_current`` fails on a stale entry,
and the process-mode job's script runs off live too and must match its stored
result. Then:

- both exit 0 (the off run proves the script itself is correct; a stored one
  was stored only after it exited 0);
- the per-step losses and the script's other checked values (eval losses,
  reloaded outputs, running statistics) agree within :data:`FP32_TOLERANCE`,
  or the script's entry in :data:`TOLERANCE` (bf16);
- the hook's record says truthfully what ran compiled: each step's loss says
  whether its autograd graph went through compiled code (corpus_report.py),
  and that ground truth is held against the record's ``autocompile`` section
  and its ``speedup`` decision (:func:`untruths`).

A handful also run as real process-mode jobs through ``trcomp.PyTorch``.
Every run uses the session's warm inductor cache (tests/helpers/compile_cache.py:
both pytest-xdist workers, and later runs while its key holds); set
``TORCHINDUCTOR_CACHE_DIR`` to use another. The table of results (pattern, loss difference, what
was compiled, what was kept) is written to ``$TRCOMP_CORPUS_TABLE``, default
``corpus-table.md`` in pytest's base temp dir, for a closing note.
"""

from __future__ import annotations

import ast
import importlib.metadata
import io
import json
import os
import subprocess
import sys
import tarfile
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from tests.helpers import corpus_off, forkserver, jobs, zygote
from tests.helpers.records import RANKS, compilations, read_records, records_in_members
from trcomp import TrainingCompilerConfig
from trcomp_container.backends import resolve_backend, resolve_engine
from trcomp_container.devices import Devices
from trcomp_container.environment import build_environment
from trcomp_container.job import JobPaths

pytestmark = pytest.mark.slow

CORPUS = Path(__file__).resolve().parent / "corpus"
SCRIPTS = sorted(p.name for p in CORPUS.glob("*.py") if p.name != "corpus_report.py")
ALL_SCRIPTS = list(SCRIPTS)
# TRCOMP_CORPUS_SCRIPTS="a.py,b.py": only these (make test-214 runs a part of the corpus
# on the second torch within CI's budget; `make test-214 CORPUS_214=all` runs it all).
_CHOSEN = [name.strip() for name in os.environ.get("TRCOMP_CORPUS_SCRIPTS", "").split(",")]
if any(_CHOSEN) and _CHOSEN != ["all"]:
    _UNKNOWN = sorted(set(_CHOSEN) - set(SCRIPTS))
    assert not _UNKNOWN, f"TRCOMP_CORPUS_SCRIPTS names no corpus script: {_UNKNOWN}"
    SCRIPTS = [name for name in SCRIPTS if name in _CHOSEN]
# The framework_version of the jobs below: the installed torch's, as process mode needs.
TORCH_VERSION = ".".join(importlib.metadata.version("torch").split("+")[0].split(".")[:2])
OFF = TrainingCompilerConfig(enabled=False)
DEFAULT = TrainingCompilerConfig()
CPU = Devices()
FP32_TOLERANCE = 1e-4
# bf16 keeps 8 significant bits: one rounding of a loss near 1.4 moves it by up to 2^-8
# (3.9e-3). Inductor fuses the autocast region and rounds to bf16 at other points than
# eager's op-by-op kernels, so each step's loss may differ by a few such roundings, and
# training carries them into the weights; a real defect (a wrong gradient) moves losses
# by 1e-1 within a few steps.
TOLERANCE = {"autocast_bf16.py": 2e-2}
# The hook may leave these eager (as long as its record says so and why); every other
# script's model must run compiled code by the end of the job.
MAY_STAY_EAGER = {
    "data_parallel_cpu.py": "issue 24: no compiled module under nn.DataParallel",
    "changing_unroll.py": "dynamo's recompile limit: a new graph for every loop count",
    "python_state.py": "dynamo's recompile limit: a new graph for every value of the call "
    "counter (each one checked, the counter still counts each call once)",
    "torch_func.py": "dynamo runs a module called inside torch.func transforms eager",
    "variable_seq_len.py": "dynamo does not trace nn.GRU (a graph break): no graph to compile",
    "buffer_center_update.py": "verification: torch's compiled backward reads the buffer "
    "after forward updated it (wrong gradients)",
    "gradient_penalty.py": "a backward through the critic with create_graph=True: that step "
    "recomputed eagerly, then eager",
    "higher_order_grads.py": "the inner step's gradients keep a graph (create_graph=True): "
    "that step recomputed eagerly, then eager",
    "late_penalty.py": "a gradient penalty from step 6 (create_graph=True): that step "
    "recomputed eagerly, then eager",
    "user_hooks.py": "dynamo breaks the graph at a module's full backward hook ('require "
    "compiled autograd') and compiles only the script's forward hook",
    "rnn_unrolled.py": "verification: a Python loop over LSTMCell that compiling unrolls "
    "into one graph of 100 copies",
}
# What the record must say about the scripts the hook leaves eager.
MUST_SAY = {
    "data_parallel_cpu.py": lambda auto: any(
        "DataParallel" in why for why in (auto.get("skipped") or {}).values()
    ),
    "changing_unroll.py": lambda auto: any(
        (m.get("limit") or "").startswith("recompile_limit") and m.get("ran_compiled") is False
        for m in auto.get("modules", [])
    ),
    "python_state.py": lambda auto: any(
        (m.get("limit") or "").startswith("recompile_limit") and m.get("verified_calls", 0) > 1
        for m in auto.get("modules", [])
    ),
    "torch_func.py": lambda auto: any(
        m.get("eager_calls") and m.get("ran_compiled") is False for m in auto.get("modules", [])
    ),
    "variable_seq_len.py": lambda auto: all(
        m.get("ran_compiled") is False for m in auto.get("modules", [])
    ),
    "user_hooks.py": lambda auto: all(
        m["ran_compiled"] is False and m["graphs_seen"] == 0 and "<lambda>" in (m["limit"] or "")
        for m in auto["modules"]
    ),
    "buffer_center_update.py": lambda auto: _kept_eager_by_verification(auto),
    "gradient_penalty.py": lambda auto: _eager_after_double_backward(auto),
    "higher_order_grads.py": lambda auto: _eager_after_double_backward(auto),
    "late_penalty.py": lambda auto: _eager_after_double_backward(auto),
    "rnn_unrolled.py": lambda auto: _kept_eager_by_verification(
        auto, "calls cell (LSTMCell) 100 times"
    ),
}
# Scripts that train several models: each must be compiled (and run compiled at the end).
MUST_COMPILE = {"gan.py": 2}
# More that a script's record must show.
MUST_HOLD = {
    # The evaluation graph (eval mode, no gradients) is compiled after training's and checked.
    "evaluation.py": lambda record: (
        record["compile"]["graphs"] >= 2 and record["autocompile"]["modules"][0]["rechecks"] >= 1
    ),
    # FSDP2: each sharded block compiled inside FSDP's hooks and checked; the root left to FSDP.
    "fsdp2_two_ranks.py": lambda record: (
        [m["module"] for m in record["autocompile"]["modules"]]
        == [f"FSDPNet.blocks.{index}" for index in range(3)]
        and all(
            m["block_of"] == "FSDPNet" and m["verified"] and m["ran_compiled"]
            for m in record["autocompile"]["modules"]
        )
    ),
    # Trainer's compile, turned on by trcomp through Accelerate: taken over, checked and
    # filed as trcomp's; every step counted, no recompile.
    "hf_trainer_tiny.py": lambda record: (
        record["autocompile"]["script_compiled"] == []
        and [
            (m["module"], m["by"], m["verified"], m["ran_compiled"])
            for m in record["autocompile"]["modules"]
        ]
        == [("GPT2LMHeadModel", "trcomp, through Accelerate", True, True)]
        and record["compile"]["recompiles"] == 0
        and record["steps"] == 20
    ),
}
RUN_TIMEOUT_S = 600
TWO_RANKS = "# corpus: 2 ranks"
"""In a script's docstring: it runs under torchrun, two gloo ranks (rank 0 writes the report)."""


def _kept_eager_by_verification(auto: dict[str, Any], why: str = "") -> bool:
    """The record names a module that verification kept eager (and why, when given)."""
    return any(
        (m.get("failed") or "").startswith("verification:") and why in m["failed"]
        for m in auto.get("modules", [])
    )


def _eager_after_double_backward(auto: dict[str, Any]) -> bool:
    """The record names a module a backward with create_graph=True went through (that step
    recomputed it eagerly) and that ran eager after."""
    return any(
        m.get("double_backwards") and "create_graph=True" in (m.get("failed") or "")
        for m in auto.get("modules", [])
    )


@dataclass
class Run:
    """One run of a corpus script: exit code, output, its report and the hook's records."""

    returncode: int
    output: str
    wall_s: float
    report: dict[str, Any] | None
    records: list[dict[str, Any]] = field(default_factory=list)
    stored: bool = False  # the compiler-off result of tests/container/corpus_off


def pattern(script: str) -> str:
    """The first line of the script's docstring, less its ``Pattern:`` prefix."""
    doc = ast.get_docstring(ast.parse((CORPUS / script).read_text())) or script
    return doc.splitlines()[0].removeprefix("Pattern:").strip()


def environment(base: Path, config: TrainingCompilerConfig, cache: Path) -> dict[str, str]:
    """The environment the container gives ``script`` under ``config``, on this CPU host."""
    paths = JobPaths.under(base)
    for directory in (paths.model, paths.output_data, paths.code):
        directory.mkdir(parents=True, exist_ok=True)
    base_env = {
        **jobs.job_env(base),
        "SM_MODEL_DIR": str(paths.model),
        "TORCHINDUCTOR_CACHE_DIR": str(cache),
        "CORPUS_OUT": str(base / "corpus.json"),
    }
    backend = resolve_backend(config, CPU)
    env = build_environment(
        config=config,
        backend=backend,
        engine=resolve_engine(config, backend, CPU),
        devices=CPU,
        paths=paths,
        base_env=base_env,
        metrics_dir=paths.output / RANKS,
        scratch_dir=base / "scratch",
    )
    return env


def start(
    base: Path,
    script: str,
    config: TrainingCompilerConfig,
    cache: Path,
    fork: zygote.Zygote | None = None,
) -> Any:
    """Start ``script`` as the container would run it under ``config``, on this CPU host:
    forked from ``fork`` when its environment allows (tests/helpers/zygote.py), else a
    new process; two ranks under torchrun, forked by the session's fork server where
    there is one (``TRCOMP_TEST_ZYGOTE=off``: new processes too)."""
    env = environment(base, config, cache)
    command = [sys.executable, str(CORPUS / script)]
    child: Any = None
    if TWO_RANKS in (CORPUS / script).read_text():
        command[1:1] = ["-m", "torch.distributed.run", "--standalone", "--nproc_per_node", "2"]
        if fork is not None and os.environ.get(forkserver.DIR_ENV):
            # torchrun runs for real; its ranks are forked (tests/helpers/forkserver.py).
            command[0] = str(forkserver.installed_shim())
            env.update(forkserver.environment(Path(os.environ[forkserver.DIR_ENV])))
    elif fork is not None:
        child = fork.start(command, env, base, base / "output.log")
    if child is None:
        child = subprocess.Popen(
            command, env=env, cwd=base, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True
        )
    return child, base, time.monotonic()


def finish(started: Any) -> Run:
    child, base, began = started
    try:
        output, _ = child.communicate(timeout=RUN_TIMEOUT_S)
    except subprocess.TimeoutExpired:
        child.kill()
        output, _ = child.communicate()
        output += f"\n[corpus] killed after {RUN_TIMEOUT_S} s"
    report_path = base / "corpus.json"
    report = json.loads(report_path.read_text()) if report_path.exists() else None
    return Run(
        child.returncode,
        output,
        time.monotonic() - began,
        report,
        read_records(base / "output"),
    )


@pytest.fixture(scope="session")
def inductor_cache(warm_compile_cache: Path) -> Path:
    kept = os.environ.get("TORCHINDUCTOR_CACHE_DIR")
    return Path(kept) if kept else warm_compile_cache


@pytest.fixture(scope="session")
def fork(
    tmp_path_factory: pytest.TempPathFactory, inductor_cache: Path
) -> Iterator[zygote.Zygote | None]:
    """The worker's zygote for the default config's runs (tests/helpers/zygote.py);
    ``TRCOMP_TEST_ZYGOTE=off``: every run a new process."""
    if os.environ.get("TRCOMP_TEST_ZYGOTE") == "off":
        yield None
        return
    base = tmp_path_factory.mktemp("zygote")
    forks = zygote.Zygote(environment(base, DEFAULT, inductor_cache), base / "stderr.log")
    yield forks
    forks.close()


@pytest.fixture(scope="session")
def corpus_runs(
    tmp_path_factory: pytest.TempPathFactory, inductor_cache: Path, fork: zygote.Zygote | None
):
    """``runs(script, *configs)``: one run per config (default: off, then default), started
    at once; each (script, config) runs once per session. ``off`` is the stored result
    when it still matches (:func:`tests.helpers.corpus_off.usable`), else a live run;
    ``off-live`` is always a live run."""
    done: dict[tuple[str, str], Run] = {}
    stored = corpus_off.load()

    def runs(script: str, *configs: str) -> list[Run]:
        wanted = [c for c in configs or ("off", "default") if (script, c) not in done]
        kept = corpus_off.usable(script, stored) if "off" in wanted else None
        if kept is not None:
            done[script, "off"] = Run(0, "", stored[script]["wall_s"], kept, stored=True)
            wanted.remove("off")
        started = {
            name: start(
                tmp_path_factory.mktemp(f"{script.removesuffix('.py')}-{name}"),
                script,
                DEFAULT if name == "default" else OFF,
                inductor_cache,
                fork,
            )
            for name in wanted
        }
        for name, child in started.items():
            done[script, name] = finish(child)
        return [done[script, c] for c in configs or ("off", "default")]

    return runs


@pytest.fixture(scope="session")
def table(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, dict[str, str]]]:
    """The results, one row per script, written as markdown when the session ends."""
    rows: dict[str, dict[str, str]] = {}
    yield rows
    if not rows:
        return
    target = Path(
        os.environ.get("TRCOMP_CORPUS_TABLE") or tmp_path_factory.getbasetemp() / "corpus-table.md"
    )
    worker = os.environ.get("PYTEST_XDIST_WORKER")
    if worker:  # one table per pytest-xdist worker, each with the rows it ran
        target = target.with_name(f"{target.stem}-{worker}{target.suffix}")
    columns = ["script", "pattern", "max loss diff", "compiled", "kept", "s (off/default)"]
    lines = [
        "| " + " | ".join([*columns, "result"]) + " |",
        "|" + "---|" * (len(columns) + 1),
    ]
    for name in sorted(rows):
        row = rows[name]
        cells = [row.get(column, "") for column in [*columns, "result"]]
        lines.append("| " + " | ".join(cell.replace("|", "/") for cell in cells) + " |")
    target.write_text("\n".join(lines) + "\n")
    print(f"\n[corpus] table written to {target}")


# -- comparing the two runs ------------------------------------------------------------


def max_diff(off: dict[str, Any], default: dict[str, Any]) -> float:
    """The largest difference between the runs' per-step losses and checked values."""
    if len(off["losses"]) != len(default["losses"]):
        return float("inf")
    pairs = [
        (a, b)
        for step_a, step_b in zip(off["losses"], default["losses"], strict=True)
        for a, b in zip(step_a, step_b, strict=True)
    ]
    for name, values in off["checks"].items():
        other = default["checks"].get(name, [])
        if len(other) != len(values):
            return float("inf")
        pairs += list(zip(values, other, strict=True))
    return max(abs(a - b) for a, b in pairs)


def first_drift(off: dict[str, Any], default: dict[str, Any], tolerance: float) -> str:
    for step, (a, b) in enumerate(zip(off["losses"], default["losses"], strict=False), 1):
        worst = max(abs(x - y) for x, y in zip(a, b, strict=True))
        if worst > tolerance:
            return f"step {step}: off {a} default {b}"
    differing = {k: v for k, v in default["checks"].items() if v != off["checks"].get(k)}
    return "checked values differ: " + json.dumps(differing)[:300]


# -- holding the record against what ran -----------------------------------------------


def the_record(run: Run) -> dict[str, Any]:
    """The record of the script's one process, or of rank 0 (two ranks: both wrote one)."""
    assert len(run.records) in (1, 2), f"{len(run.records)} records"
    return min(run.records, key=lambda record: int(record.get("rank") or 0))


def claimed(record: dict[str, Any]) -> list[str]:
    """What the record says ran compiled: the hook's modules that did not fail, the script's."""
    auto = record.get("autocompile") or {}
    hooked = [
        m["module"]
        for m in auto.get("modules", [])
        if not m.get("failed") and m.get("ran_compiled", True)
    ]
    return hooked + list(auto.get("script_compiled", []))


def kept(record: dict[str, Any]) -> str | None:
    """The speed-up decision's ``keep`` (None: no decision, the compiled code stays)."""
    decision = (record.get("speedup") or {}).get("decision")
    return decision["keep"] if decision else None


def untruths(script: str, report: dict[str, Any], record: dict[str, Any]) -> list[str]:
    """Where the hook's record disagrees with what the script's steps ran (empty: truthful)."""
    problems = []
    if record.get("autocompile") is None:
        return ["the record has no autocompile section under the default config"]
    says = claimed(record)
    keep = kept(record)
    flags = [[f for f in step if f is not None] for step in report["compiled"]]
    ran_any = any(any(step) for step in flags)
    last = next((step for step in reversed(flags) if step), None)
    # A job that ends inside a measurement's eager window (a noisy first round, measured
    # again with longer windows: a busy machine) ran its last step eager on purpose; the
    # record lists its last step (``steps``, the hook's count) among the eager steps.
    eager_steps = (record.get("speedup") or {}).get("eager_steps") or []
    measuring = bool(record.get("steps")) and record["steps"] in eager_steps
    if says and compilations(record) == 0:
        problems.append(f"lists {says} as compiled but counted no compilation")
    if last is not None:
        if any(last) and keep == "eager":
            problems.append("says it kept eager, but the last step ran compiled code")
        if any(last) and not says:
            problems.append("the last step ran compiled code, but the record lists nothing")
        if not any(last) and says and keep != "eager" and not measuring:
            problems.append(
                f"lists {says} as compiled (kept {keep or 'compiled'}), but the last step ran eager"
            )
    compiled = [m for m in record["autocompile"]["modules"] if m.get("ran_compiled")]
    if len(compiled) < MUST_COMPILE.get(script, 0):
        problems.append(f"{len(compiled)} modules ran compiled, not {MUST_COMPILE[script]}")
    if script in MUST_HOLD and not MUST_HOLD[script](record):
        problems.append("the record does not show what MUST_HOLD expects")
    if script in MUST_SAY and not MUST_SAY[script](record["autocompile"]):
        problems.append(f"the record does not say why it stayed eager ({MAY_STAY_EAGER[script]})")
    if script not in MAY_STAY_EAGER:
        if not says:
            auto = record["autocompile"]
            problems.append(f"nothing compiled; skipped: {auto.get('skipped')}")
        elif last is not None and not ran_any:
            problems.append("no step ran compiled code")
    return problems


def describe(record: dict[str, Any]) -> tuple[str, str]:
    """The table's ``compiled`` and ``kept`` cells for one record."""
    auto = record.get("autocompile") or {}
    parts = []
    for module in auto.get("modules", []):
        regional = f", regional {module['regional']}" if module.get("regional") else ""
        failed = f" FAILED ({module['failed'][:60]})" if module.get("failed") else ""
        parts.append(f"{module['module']}{regional}{failed}")
    parts += [f"{name} (by the script)" for name in auto.get("script_compiled", [])]
    parts += [f"skipped {name}: {why}" for name, why in auto.get("skipped", {}).items()]
    speedup = record.get("speedup") or {}
    keep = kept(record)
    keep_cell = keep or f"not measured: {(speedup.get('not_measured') or '')[:60]}"
    return "; ".join(parts) or "nothing", keep_cell


def tail(run: Run) -> str:
    return run.output[-3000:]


@pytest.mark.parametrize("script", SCRIPTS)
def test_the_default_switch_trains_the_script_as_the_compiler_off_does(
    script: str, corpus_runs, table
) -> None:
    off, default = corpus_runs(script)
    row = table.setdefault(script, {"script": script, "pattern": pattern(script)})
    row["s (off/default)"] = (
        f"{off.wall_s:.0f}{' stored' if off.stored else ''}/{default.wall_s:.0f}"
    )
    row["result"] = "FAIL"
    assert off.returncode == 0 and off.report, f"the script fails eager:\n{tail(off)}"
    if default.returncode != 0 or default.report is None:
        row["result"] = "FAIL: crashed: " + (default.output.strip().splitlines() or [""])[-1]
        pytest.fail(f"crashed under the default config:\n{tail(default)}")
    tolerance = TOLERANCE.get(script, FP32_TOLERANCE)
    diff = max_diff(off.report, default.report)
    record = the_record(default)
    row["max loss diff"] = f"{diff:.1e}"
    row["compiled"], row["kept"] = describe(record)
    problems = untruths(script, default.report, record)
    if diff > tolerance:
        problems.insert(0, f"losses differ by {diff:.2e} > {tolerance:g}: " + first_drift(
            off.report, default.report, tolerance))  # fmt: skip
    decisions = [json.dumps((r.get("speedup") or {}).get("decision")) for r in default.records]
    if len(set(decisions)) > 1:  # torchrun: one decision for the job, the slowest rank's
        problems.append(f"the ranks kept different decisions: {decisions}")
    problems += cold_followers(default.records)
    row["result"] = "PASS" if not problems else "FAIL: " + "; ".join(problems)
    assert not problems, "\n".join(problems)


def cold_followers(records: list[dict[str, Any]]) -> list[str]:
    """Ranks after the host's first that compiled a graph cold instead of loading it."""
    problems = []
    for record in records:
        compiled = record.get("compile") or {}
        turns, cache = compiled.get("turns") or {}, compiled.get("cache") or {}
        if int(record.get("rank") or 0) == 0 or not compiled.get("events"):
            continue
        if turns.get("waited") != turns.get("compiles") or cache.get("fxgraph_miss"):
            problems.append(f"rank {record.get('rank')} compiled cold: {turns}, {cache}")
    return problems


# -- a handful as real jobs ------------------------------------------------------------

AS_JOBS = [s for s in ("mlp_loop.py",) if s in SCRIPTS]


@pytest.mark.parametrize("script", AS_JOBS)
def test_a_real_process_mode_job_trains_as_the_compiler_off_run(
    script: str, corpus_runs, tmp_path: Path, role: str
) -> None:
    from trcomp import PyTorch  # the SDK: sagemaker is imported only here

    # Live, not stored: the stored result is checked against it below.
    (off,) = corpus_runs(script, "off-live")
    assert off.returncode == 0 and off.report, tail(off)
    kept = corpus_off.usable(script, corpus_off.load())
    if kept is not None:
        assert max_diff(off.report, kept) <= FP32_TOLERANCE, (
            f"{script}: a live off run no longer matches its stored result: make corpus-off"
        )
    name = script.removesuffix(".py").replace("_", "-")
    estimator = PyTorch(
        entry_point=script,
        source_dir=str(CORPUS),
        role=role,
        instance_type="local_process",
        instance_count=1,
        output_path=f"file://{tmp_path / 'out'}",
        compiler_config=DEFAULT,
        framework_version=TORCH_VERSION,
    )
    estimator.fit(wait=True, job_name=f"corpus-{name}")
    out = tmp_path / "out" / f"corpus-{name}" / "output"
    with tarfile.open(out / "model.tar.gz") as tar:
        report = json.load(tar.extractfile("corpus.json"))  # type: ignore[arg-type]
    with tarfile.open(out / "output.tar.gz") as tar:
        members = {m.name: tar.extractfile(m).read() for m in tar.getmembers() if m.isfile()}  # type: ignore[union-attr]
    (record,) = records_in_members(members)
    summary = json.load(io.BytesIO(members["data/compiler/summary.json"]))
    assert summary["outcome"] == "success"
    # Compiled with no code change, in process mode, and the speed-up measured.
    assert summary["backend"] == "inductor" and summary["metrics"]["graphs_compiled"] >= 1
    assert summary["compiled"].startswith("Sequential (by trcomp, no code change"), summary
    assert summary["speedup"]["speedup_vs_eager"] > 0
    diff = max_diff(off.report, report)
    problems = untruths(script, report, record)
    if diff > FP32_TOLERANCE:
        problems.insert(0, f"losses differ by {diff:.2e}: " + first_drift(
            off.report, report, FP32_TOLERANCE))  # fmt: skip
    assert not problems, "\n".join(problems)


# -- the stored compiler-off results ---------------------------------------------------


def test_the_stored_compiler_off_results_are_current() -> None:
    """Every corpus script has a stored off result made from its current text."""
    entries = corpus_off.load()
    if not entries:
        pytest.skip(
            f"no stored off results for torch {corpus_off.torch_version()}: "
            "every off run is live (make corpus-off stores them)"
        )
    problems = corpus_off.stale(ALL_SCRIPTS, entries)
    assert not problems, "run `make corpus-off` and commit the file:\n" + "\n".join(problems)
