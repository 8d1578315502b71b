"""The corpus's zygote (tests/helpers/zygote.py) reports each forked script's exit, also
when its answers reach the test together (the corpus waits on the compiler-off process
first, while the forked run starts and ends: issue 42's CI hang under torch 2.14)."""

from __future__ import annotations

import os
import sys
import time
from pathlib import Path

from tests.helpers import zygote


def _reaped(pid: int, log: Path) -> None:
    """Wait until the zygote has started and reaped its one child, then a moment for its
    answer: both of the run's answers are in the pipe before the test reads one."""
    children = Path(f"/proc/{pid}/task/{pid}/children")
    deadline = time.monotonic() + 120
    while not (log.exists() and children.read_text().strip() == ""):
        assert time.monotonic() < deadline, "the forked script did not exit"
        time.sleep(0.1)
    time.sleep(0.5)


def test_a_forked_script_whose_answers_arrive_together_is_seen_to_exit(tmp_path: Path) -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("TRCOMP_", "PYTHONPATH"))}
    script = tmp_path / "script.py"
    script.write_text("import sys, torch\nprint('ran', torch.ones(2).sum().item())\nsys.exit(3)\n")
    forks = zygote.Zygote(env, tmp_path / "stderr.log")
    try:
        runs = []
        for name in ("first", "second"):
            log = tmp_path / f"{name}.log"
            run = forks.start([sys.executable, str(script)], env, tmp_path, log)
            assert run is not None
            _reaped(forks.pid, log)
            runs.append(run)
        for run in runs:
            output, _ = run.communicate(timeout=30)
            assert run.returncode == 3
            assert "ran 2.0" in output
    finally:
        forks.close()
