"""The zero-code compile of plain PyTorch loops, in real jobs through the real entrypoint.

The script (tests/container/scripts/plain_loop.py) imports neither trcomp nor
calls torch.compile. Every case of what the start-up hook must compile, leave
alone, or report, runs as its own job; the inductor jobs of this module share
the session's warm compile cache (tests/helpers/compile_cache.py), so only the
first compile of each graph with a key is cold. The eager losses a job is compared
with come from the same script run in this process (:func:`eager_losses`): a
compiler-off job runs it unchanged, so a job of its own proved nothing more.
"""

from __future__ import annotations

import functools
import importlib.util
import json
import math
import sys
import tempfile
from collections.abc import Sequence
from pathlib import Path
from unittest import mock

import pytest

from tests.helpers import jobs
from tests.helpers.records import RANKS
from trcomp.config import TrainingCompilerConfig
from trcomp.contract.config import torch_has_aot
from trcomp_container.inprocess import record as rank_record

pytestmark = pytest.mark.slow

STEPS = 20


@pytest.fixture(scope="session")
def graph_cache(warm_compile_cache: Path) -> Path:
    """The session's warm cache: no test here tests a cold compile."""
    return warm_compile_cache


# Session-scoped: a module-scoped fixture is set up again on a pytest-xdist worker that ran
# another module's tests between this module's.
@pytest.fixture(scope="session")
def run(tmp_path_factory: pytest.TempPathFactory, graph_cache: Path):
    """Run the plain loop's ``case`` as a job; each (case, config) once per session."""
    done: dict[str, jobs.JobRun] = {}

    def run_case(case: str, config: TrainingCompilerConfig | None, **hyperparameters):
        key = f"{case}-{config!r}-{sorted(hyperparameters.items())}"
        env = {"TORCHINDUCTOR_CACHE_DIR": str(graph_cache)}
        if key not in done:
            done[key] = jobs.run_job(
                tmp_path_factory.mktemp(case),
                config=config,
                entry_point="plain_loop.py",
                hyperparameters={"case": case, "steps": STEPS, **hyperparameters},
                env=env,
            )
            assert done[key].returncode == 0, done[key].output[-3000:]
        return done[key]

    return run_case


def losses(job: jobs.JobRun) -> list[float]:
    return json.loads((job.base / "model" / "losses.json").read_text())


@functools.cache
def eager_losses(case: str, layers: int = 1) -> tuple[float, ...]:
    """The plain loop's losses, eager, run in this process: what a compiler-off job of the
    same case writes (the script is plain PyTorch; with the compiler off a job runs it
    unchanged, so a job of its own proved nothing more). Torch's global random state is
    left as it was."""
    import torch

    spec = importlib.util.spec_from_file_location(
        "plain_loop_eager", jobs.SCRIPTS / "plain_loop.py"
    )
    assert spec is not None and spec.loader is not None
    script = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(script)
    with tempfile.TemporaryDirectory() as out:
        argv = ["plain_loop.py", f"--case={case}", f"--steps={STEPS}", f"--layers={layers}"]
        with torch.random.fork_rng(), mock.patch.object(sys, "argv", [*argv, f"--model-dir={out}"]):
            script.main()
        return tuple(json.loads((Path(out) / "losses.json").read_text()))


def whole_model(job: jobs.JobRun) -> str:
    """The summary's ``compiled`` for TinyLM compiled whole, by the job's torch: from 2.14
    on, the job's compile cache gets its ahead-of-time artifact (test_aot.py)."""
    saved = torch_has_aot(job.summary["versions"]["torch"])
    how = ", compiled ahead of time and saved for the next job" if saved else ""
    return f"TinyLM (by trcomp, no code change{how}); 1 graph"


def close(a: Sequence[float], b: Sequence[float], tol: float = 1e-4) -> bool:
    return len(a) == len(b) == STEPS and all(
        math.isclose(x, y, abs_tol=tol) for x, y in zip(a, b, strict=True)
    )


AUTO = TrainingCompilerConfig(backend="auto")  # inductor on this CPU host (test_backends.py)
LAYERS = 2  # repeated blocks, which the default still compiles whole


def test_a_plain_loop_is_compiled_whole_with_no_code_change(run):
    job = run("plain", AUTO, layers=LAYERS)
    summary = job.summary
    assert summary["backend"] == "inductor"
    assert summary["metrics"]["graphs_compiled"] >= 1
    (rank,) = summary["ranks"]
    (module,) = rank["autocompile"]["modules"]
    assert module["module"] == "TinyLM" and module["regional"] is None
    assert rank["autocompile"]["skipped"] == {"CrossEntropyLoss": "no trainable parameters"}
    assert summary["compiled"] == whole_model(job)
    if not torch_has_aot(summary["versions"]["torch"]):  # the record says why (test_aot.py)
        assert module["aot"]["path"] == "off" and "has no aot_compile" in module["aot"]["reason"]
    assert not [w for w in summary["warnings"] if "nothing was compiled" in w]
    # The eager steps of the measurement leave the losses where eager puts them.
    assert close(losses(job), eager_losses("plain", LAYERS))
    # The typed record the hook wrote reads back to the same file (inprocess/test_record.py).
    (path,) = (job.base / "output" / RANKS).glob(rank_record.RECORD_GLOB)
    record = rank_record.read(path)
    assert record.speedup is not None and record.compile and record.compile.graphs >= 1
    assert json.dumps(record.to_json(), indent=1) == path.read_text()


def test_a_model_with_repeated_blocks_is_compiled_with_one_region_for_its_blocks(run):
    # regional=True: LAYERS encoder layers, one region traced once, one graph.
    job = run("plain", TrainingCompilerConfig(backend="inductor", regional=True), layers=LAYERS)
    summary = job.summary
    (module,) = summary["ranks"][0]["autocompile"]["modules"]
    assert module["failed"] is None
    if job.summary["versions"]["torch"].startswith("2.9."):
        assert module["regional"] == f"{LAYERS} x TransformerEncoderLayer"
        assert summary["compiled"] == (
            f"TinyLM (by trcomp, no code change, regional: {LAYERS} x TransformerEncoderLayer); "
            "1 graph"
        )
    else:  # wrong gradients under inductor on torch 2.14 (regions.torch_reason): whole
        assert module["regional"] is None and "wrong gradients" in module["regional_off"]
    assert summary["metrics"]["graphs_compiled"] == 1
    assert close(losses(job), eager_losses("plain", LAYERS))


def test_every_inductor_job_measures_its_speedup_over_eager(run):
    summary = run("plain", AUTO, layers=LAYERS).summary
    speedup = summary["speedup"]
    assert speedup["source"] == "measured" and speedup["eager_steps"] == [8, 9, 10, 11]
    assert speedup["kept"] in ("compiled", "eager")
    metrics = summary["metrics"]
    assert {"eager_step_s", "step_time_s", "speedup_vs_eager"} <= set(metrics)
    assert metrics["speedup_vs_eager"] == speedup["speedup_vs_eager"]
    assert "vs eager, measured in this job" in run("plain", AUTO, layers=LAYERS).output


def test_a_frozen_teacher_in_eval_mode_is_left_eager(run):
    job = run("teacher", TrainingCompilerConfig(backend="inductor"))
    auto = job.summary["ranks"][0]["autocompile"]
    assert [m["module"] for m in auto["modules"]] == ["TinyLM"]  # the student only
    assert auto["skipped"]["TinyLM"] == "eval mode"
    assert close(losses(job), eager_losses("teacher"))


def test_a_forward_dynamo_cannot_trace_runs_eager_and_says_why(run):
    job = run("untraceable", TrainingCompilerConfig(backend="inductor", fallback="eager"))
    summary = job.summary
    assert summary["metrics"]["graphs_compiled"] == 0
    expected = "nothing: Untraceable (compiled by trcomp but ran eager at the end)"
    assert summary["compiled"] == expected
    (warning,) = [w for w in summary["warnings"] if "nothing was compiled" in w]
    assert "dynamo could not trace the model" in warning and "disable" in warning
    assert "not measured" in job.output  # no speed-up without compiled steps


def test_a_compilation_that_fails_falls_back_to_eager_with_the_reason(run):
    # Inductor's own fault injection: the generated C++ for relu does not compile.
    broken = TrainingCompilerConfig(
        backend="inductor", inductor_options={"cpp.inject_relu_bug_TESTING_ONLY": "compile_error"}
    )
    job = run("plain", broken)  # one layer: less to compile before the C++ fails
    (module,) = job.summary["ranks"][0]["autocompile"]["modules"]
    assert module["failed"] and "CppCompileError" in module["failed"]
    assert job.summary["compiled"] == "nothing: TinyLM (failed, ran eager)"
    (warning,) = [w for w in job.summary["warnings"] if "nothing was compiled" in w]
    assert "compiling TinyLM failed" in warning and "fallback='fail'" in warning
    assert close(losses(job), eager_losses("plain"))


def test_auto_compile_off_compiles_nothing_and_says_so(run):
    job = run("plain", TrainingCompilerConfig(backend="inductor", auto_compile=False))
    assert job.summary["metrics"]["graphs_compiled"] == 0
    assert job.summary["ranks"][0]["autocompile"] is None
    (warning,) = [w for w in job.summary["warnings"] if "nothing was compiled" in w]
    assert "auto_compile=False" in warning
    assert "WARNING" in job.output and "nothing was compiled" in job.output


def test_the_decision_is_stored_and_read_back_by_the_next_job_of_the_lineage(tmp_path, graph_cache):
    config = TrainingCompilerConfig(backend="auto")
    base = tmp_path / "job"
    # The plain loop of test_a_plain_loop_is_compiled_whole_with_no_code_change: its graphs are
    # in the warm cache. Its own tree: the decision key holds the script's path (argv), the
    # same for every job of a lineage on SageMaker (/opt/ml/code), so the next job runs there.
    hyperparameters = {"case": "plain", "steps": STEPS, "layers": LAYERS}
    env = {"TORCHINDUCTOR_CACHE_DIR": str(graph_cache)}
    first = jobs.run_job(
        base, config=config, entry_point="plain_loop.py", hyperparameters=hyperparameters, env=env
    )
    assert first.returncode == 0, first.output[-3000:]
    measured = first.summary["speedup"]
    assert measured["source"] == "measured"
    # The same lineage (the same checkpoint directory): the next job starts with the decision.
    second = jobs.run_train(base, env=env)
    assert second.returncode == 0, second.output[-3000:]
    stored = second.summary["speedup"]
    assert stored["source"] == "stored" and stored["eager_steps"] == []
    assert stored["kept"] == measured["kept"]
    assert stored["speedup_vs_eager"] == measured["speedup_vs_eager"]
    assert "measured by an earlier job" in second.output
