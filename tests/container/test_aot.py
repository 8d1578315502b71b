"""Warm starts from ahead-of-time artifacts (inprocess.aot), in real child processes.

A plain loop (no trcomp import) runs under the start-up hook twice with the
same compile cache (``TRCOMP_CACHE_DIR``), as two jobs of one lineage would.
On a torch with ``aot_compile`` (2.14) the first saves the model's artifact
and the second loads it: dynamo compiles nothing there, and both train the
same as the compiler-off run. On torch 2.9 the record says why there is no
artifact and the normal path runs. Counters, not times.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from tests.helpers import jobs
from tests.helpers.records import RANKS, read_records
from trcomp import TrainingCompilerConfig
from trcomp_container.backends import resolve_backend, resolve_engine
from trcomp_container.devices import Devices
from trcomp_container.environment import build_environment
from trcomp_container.inprocess.aot import has_aot_compile
from trcomp_container.job import JobPaths

pytestmark = pytest.mark.slow

torch = pytest.importorskip("torch")
HAS_AOT = has_aot_compile(torch)
CPU = Devices()

SCRIPT = """
import functools, json, os, sys
import torch
from torch import nn
from transformers.utils import logging as hf_logging

LOG = hf_logging.get_logger("trcomp.test")

def merged_with_defaults(func):
    # As transformers' model decorators do (merge_with_config_defaults): the wrapper reads
    # the wrapped function's code, so dynamo guards on that code object's identity.
    @functools.wraps(func)
    def wrapper(self, *args, **kwargs):
        kwargs = {**dict.fromkeys(func.__code__.co_varnames[2:func.__code__.co_argcount]), **kwargs}
        return func(self, *args, **kwargs)
    return wrapper

class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.a = nn.Linear(8, 32)
        self.b = nn.Linear(32, 1)

    @merged_with_defaults
    def forward(self, x, scale=None):
        LOG.warning_once("Net logs this once, as transformers' models do")
        return self.b(torch.relu(self.a(x))) * (SCALE if scale is None else scale)

SCALE = float(os.environ.get("SCALE", "1.0"))
torch.manual_seed(0)
model = Net()
optimizer = torch.optim.SGD(model.parameters(), lr=0.05)
losses = []
for step in range(6):
    x, y = torch.randn(8, 8), torch.randn(8, 1)
    loss = nn.functional.mse_loss(model(x), y)
    loss.backward()
    optimizer.step()
    optimizer.zero_grad()
    losses.append(loss.item())
with torch.no_grad():
    model.eval()
    losses.append(model(torch.ones(2, 8)).sum().item())
json.dump(losses, open(os.environ["LOSSES_OUT"], "w"))
"""


def run(base: Path, cache: Path, config: TrainingCompilerConfig, script: Path) -> dict[str, Any]:
    """``script`` as the container runs it, with ``cache`` as the job's compile cache."""
    paths = JobPaths.under(base)
    for directory in (paths.model, paths.output_data, paths.code):
        directory.mkdir(parents=True, exist_ok=True)
    backend = resolve_backend(config, CPU)
    env = build_environment(
        config=config,
        backend=backend,
        engine=resolve_engine(config, backend, CPU),
        devices=CPU,
        paths=paths,
        base_env={**jobs.job_env(base), "LOSSES_OUT": str(base / "losses.json")},
        metrics_dir=paths.output / RANKS,
        cache_dir=cache,
        scratch_dir=base / "scratch",
    )
    done = subprocess.run(
        [sys.executable, str(script)], env=env, cwd=base, capture_output=True, text=True
    )
    assert done.returncode == 0, done.stdout + done.stderr
    records = read_records(base / "output")  # none when the compiler is off
    return {
        "losses": json.loads((base / "losses.json").read_text()),
        "record": records[0] if records else None,
        "logged": (done.stdout + done.stderr).count("Net logs this once"),
    }


def aot_of(record: dict[str, Any]) -> dict[str, Any]:
    (module,) = record["autocompile"]["modules"]
    return module["aot"]


@pytest.fixture
def script(tmp_path: Path) -> Path:
    path = tmp_path / "train.py"
    path.write_text(SCRIPT)
    return path


OFF = TrainingCompilerConfig(enabled=False)


@pytest.mark.skipif(not HAS_AOT, reason=f"torch {torch.__version__} has no aot_compile")
def test_second_job_loads_the_artifact_an_edited_forward_does_not(
    tmp_path: Path, script: Path
) -> None:
    cache = tmp_path / "cache"
    off = run(tmp_path / "off", tmp_path / "off-cache", OFF, script)
    first = run(tmp_path / "first", cache, TrainingCompilerConfig(), script)
    second = run(tmp_path / "second", cache, TrainingCompilerConfig(), script)

    assert aot_of(first["record"])["path"] == "saved", aot_of(first["record"])
    assert len(list((cache / "aot").glob("*.pt2"))) == 1
    loaded = aot_of(second["record"])
    assert loaded["path"] == "loaded", loaded
    assert loaded["key"] == aot_of(first["record"])["key"]
    # Every training call of the second job ran the artifact; the eval call (grad off)
    # was refused by its guards and took the normal path.
    assert loaded["calls"] >= 4 and loaded["other_calls"] == 1, loaded
    assert second["record"]["compile"]["aot"]["loaded"] == 1
    (module,) = second["record"]["autocompile"]["modules"]
    assert module["ran_compiled"] is True
    for job in (first, second):
        assert job["losses"] == pytest.approx(off["losses"], abs=1e-5)
    # The forward logs once (transformers' warning_once, which dynamo cannot put in one
    # graph): the artifact skips the call, the eager first step logged it, as without trcomp.
    assert [job["logged"] for job in (off, first, second)] == [1, 1, 1]

    # Same classes, parameters and inputs, same numbers: only the forward's text differs.
    script.write_text(SCRIPT.replace(") * (SCALE if", ") * 1.0 * (SCALE if"))
    edited = run(tmp_path / "edited", cache, TrainingCompilerConfig(), script)
    aot = aot_of(edited["record"])
    assert aot["path"] == "saved", aot
    assert any("changed since the artifact was saved" in why for why in aot["stale"]), aot
    assert edited["losses"] == pytest.approx(off["losses"], abs=1e-5)
    assert len(list((cache / "aot").glob("*.pt2"))) == 1  # saved over the stale one


@pytest.mark.skipif(not HAS_AOT, reason=f"torch {torch.__version__} has no aot_compile")
def test_aot_off_says_why(tmp_path: Path, script: Path) -> None:
    """aot=False: the normal path, and the record says so. (A torch without aot_compile:
    test_autocompile.py's plain loop reads the reason in its record.)"""
    result = run(tmp_path / "job", tmp_path / "cache", TrainingCompilerConfig(aot=False), script)
    (module,) = result["record"]["autocompile"]["modules"]
    assert module["ran_compiled"] is True
    assert result["logged"] == 1
    assert module["aot"] is None
    assert not (tmp_path / "cache" / "aot").exists()


@pytest.mark.skipif(not HAS_AOT, reason=f"torch {torch.__version__} has no aot_compile")
def test_a_failed_attempt_is_not_made_again_until_the_model_changes(
    tmp_path: Path, script: Path
) -> None:
    """A graph break makes aot_compile fail: the next job of the lineage does not try
    (each attempt traces and compiles first); an edited model is tried again."""
    cache = tmp_path / "cache"
    script.write_text(
        SCRIPT.replace(
            "        return self.b(", "        torch._dynamo.graph_break()\n        return self.b("
        )
    )
    first = aot_of(run(tmp_path / "first", cache, TrainingCompilerConfig(), script)["record"])
    assert first["path"] == "off" and "failed" in first["reason"], first
    assert len(list((cache / "aot").glob("*.failed.json"))) == 1
    second = aot_of(run(tmp_path / "second", cache, TrainingCompilerConfig(), script)["record"])
    assert second["path"] == "off", second
    assert second["reason"].startswith("an earlier job's ahead-of-time compile"), second
    assert second["seconds"] == 0.0

    script.write_text(script.read_text().replace(") * (SCALE if", ") * 1.0 * (SCALE if"))
    edited = aot_of(run(tmp_path / "edited", cache, TrainingCompilerConfig(), script)["record"])
    assert edited["path"] == "off" and not edited["reason"].startswith("an earlier job"), edited
