"""The start-up probe compiles a real graph on the device the job will use."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from trcomp_container.probe import check_inductor_options, run_probe


def probe_child(tmp_path: Path, *args: str, **env: str) -> dict[str, object]:
    child_env = {**os.environ, "TORCHINDUCTOR_CACHE_DIR": str(tmp_path / "cache"), **env}
    done = subprocess.run(
        [sys.executable, "-m", "trcomp_container.probe", *args],
        env=child_env,
        capture_output=True,
        text=True,
        timeout=600,
    )
    return json.loads(done.stdout.strip().splitlines()[-1])


@pytest.mark.slow
def test_inductor_probe_compiles_a_graph_on_cpu(tmp_path: Path) -> None:
    body = probe_child(tmp_path, "inductor", "0")
    assert body == {
        "ok": True,
        "reason": "",
        "hardware": "cpu, inductor compiled a test graph",
        "gpus_seen": 0,
    }
    assert list((tmp_path / "cache").rglob("*.so")) or list((tmp_path / "cache").rglob("*.py"))


@pytest.mark.slow
def test_a_missing_compiler_surfaces_in_the_probe_with_the_fix(tmp_path: Path) -> None:
    body = probe_child(tmp_path, "inductor", "0", CXX="/nonexistent/g++")
    assert body["ok"] is False
    assert "C++ compiler" in str(body["reason"]) and "install g++" in str(body["reason"])


@pytest.mark.slow
def test_gpus_that_torch_cannot_see_fail_the_probe_with_the_drivers_words() -> None:
    # No GPU on this machine: the probe for a 2-GPU host must say torch sees none.
    result = run_probe("inductor", 2, dict(os.environ))
    assert not result.ok and result.gpus_seen == 0
    assert "sees none of the 2 GPUs" in result.reason
    eager = run_probe("eager", 2, dict(os.environ))
    assert not eager.ok and "sees none of the 2 GPUs" in eager.reason


def test_inductor_options_are_checked_against_the_mode_torch_applies() -> None:
    # torch 2.9: reduce-overhead sets triton.cudagraphs=True, max-autotune also max_autotune.
    options = {"triton.cudagraphs": False, "max_autotune": True, "epilogue_fusion": False}
    found = check_inductor_options(options, "reduce-overhead", dict(os.environ))
    assert found.unknown == []
    assert found.contradicted == {"triton.cudagraphs": (False, True)}
    agreeing = check_inductor_options(options, "max-autotune-no-cudagraphs", dict(os.environ))
    assert agreeing.contradicted == {}
    plain = check_inductor_options({"no_such_option": 1}, "default", dict(os.environ))
    assert plain.unknown == ["no_such_option"] and plain.contradicted == {}
