"""The attack on a keyed job's lineage, with real jobs through the real entrypoint.

Someone without the key writes the job's checkpoint location (the default prefix is
predictable): a pickle in every folder where inductor keeps an FX graph, sorted before
the graph, so inductor unpickles it first. Before, the next keyed job of the lineage
restored the pickles and inductor ran them. Now it restores only what the first keyed
job signed, still starts warm, and names the rest. The steps one by one, and a cache dir
inherited from the job's environment, in process: ``test_lineage_signed.py``.
"""

from __future__ import annotations

import os
import pickle
import shutil
from pathlib import Path

import pytest

from tests.helpers import jobs
from trcomp.config import TrainingCompilerConfig

pytestmark = [pytest.mark.slow, pytest.mark.cold_compile]

KEY = "team-key-of-the-lineage-tests-4f2a"
HPS = {"steps": 8}


class _Payload:
    """Unpickling it touches ``marker``: any command would run the same way."""

    def __init__(self, marker: Path) -> None:
        self.marker = marker

    def __reduce__(self) -> tuple[object, tuple[str]]:
        return os.system, (f"touch {self.marker}",)


def _plant(cache: Path, marker: Path) -> list[str]:
    """A pickle in every FX graph folder under ``cache``; their paths relative to it."""
    folders = sorted({p.parent for p in (cache / "inductor" / "fxgraph").rglob("*") if p.is_file()})
    assert folders, "the first job compiled no FX graph"
    for folder in folders:
        (folder / "-planted").write_bytes(pickle.dumps(_Payload(marker)))
    return [(folder / "-planted").relative_to(cache).as_posix() for folder in folders]


def test_a_keyed_job_runs_no_pickle_planted_in_its_checkpoint_location(tmp_path):
    config = TrainingCompilerConfig(backend="inductor")
    first = jobs.run_job(
        tmp_path / "first",
        config=config,
        entry_point="loop.py",
        hyperparameters=HPS,
        env={"TRAINING_JOB_NAME": "lineage-first", "TRCOMP_SHARED_CACHE_KEY": KEY},
    )
    assert first.returncode == 0, first.output[-4000:]
    # The next job of the lineage gets the same checkpoints, as SageMaker's sync gives them.
    second_base = tmp_path / "second"
    shutil.copytree(first.base / "checkpoints", second_base / "checkpoints")
    persisted = second_base / "checkpoints" / "trcomp-cache"
    from_lineage = tmp_path / "ran-from-the-checkpoint-location"
    planted = _plant(persisted, from_lineage)
    second = jobs.run_job(
        second_base,
        config=config,
        entry_point="loop.py",
        hyperparameters=HPS,
        env={"TRAINING_JOB_NAME": "lineage-second", "TRCOMP_SHARED_CACHE_KEY": KEY},
    )
    assert not from_lineage.exists(), "inductor unpickled what was planted in the lineage"
    assert second.returncode == 0, second.output[-4000:]

    summary = second.summary
    lineage = summary["lineage"]
    assert lineage["manifest"] == "verified" and lineage["files_refused"] == len(planted)
    assert lineage["refused"] == [f"{name} (not in a signed manifest)" for name in planted]
    assert any(planted[0] in w and "not restored" in w for w in summary["warnings"])
    # Warm all the same: every file the first job signed, and inductor's counters agree.
    assert first.summary["lineage"]["files_signed"] == first.summary["cache_files_saved"] > 0
    assert summary["cache_files_restored"] == first.summary["cache_files_saved"]
    assert summary["cache_warm"] is True
    warm = summary["ranks"][0]["compile_cache"]
    assert warm["fxgraph_hit"] > 0 and warm["fxgraph_miss"] == 0
