"""The process-tree helper on real processes: whole-tree kills, nested grace, parent death."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time
import uuid
from pathlib import Path

from trcomp.contract.proctree import TreeProcess, descendants, grace_s, outer_grace_s


def _with_marker(marker: str) -> list[int]:
    found = []
    for entry in Path("/proc").iterdir():
        try:
            if entry.name.isdigit() and marker.encode() in (entry / "cmdline").read_bytes():
                found.append(int(entry.name))
        except OSError:
            continue
    return found


def _wait(condition, timeout: float = 10.0) -> bool:
    deadline = time.monotonic() + timeout
    while not condition() and time.monotonic() < deadline:
        time.sleep(0.05)
    return bool(condition())


# A child that starts a grandchild in a session of its own (as the runner starts the
# script), both ignoring SIGTERM.
PARENT = textwrap.dedent("""
    import signal, subprocess, sys, time
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    sleeper = "import signal, time; signal.signal(signal.SIGTERM, signal.SIG_IGN); time.sleep(600)"
    subprocess.Popen([sys.executable, "-c", sleeper, sys.argv[1]], start_new_session=True)
    time.sleep(600)
""")


def test_kill_reaches_a_grandchild_in_its_own_session() -> None:
    marker = f"grandchild-{uuid.uuid4().hex}"
    tree = TreeProcess([sys.executable, "-c", PARENT, marker])
    try:
        assert _wait(lambda: len(_with_marker(marker)) == 2)  # the child and the grandchild
        assert set(_with_marker(marker)) <= {tree.pid, *descendants(tree.pid)}
        tree.terminate(grace=0.5)  # both ignore SIGTERM: the grace timer kills the tree
        assert tree.popen.wait(timeout=10) == -signal.SIGKILL
        assert _wait(lambda: not _with_marker(marker))
    finally:
        tree.kill()


def test_grace_periods_nest() -> None:
    assert grace_s({}) == 100.0
    assert grace_s({"TRCOMP_SIGTERM_GRACE_S": "3"}) == 3.0
    assert grace_s({"TRCOMP_SIGTERM_GRACE_S": "soon"}) == 100.0
    assert outer_grace_s({"TRCOMP_SIGTERM_GRACE_S": "3"}) > grace_s({"TRCOMP_SIGTERM_GRACE_S": "3"})


def test_child_gets_the_parent_death_signal() -> None:
    marker = f"orphan-{uuid.uuid4().hex}"
    # The marker travels in the environment: only the child's command line holds it.
    starter = textwrap.dedent("""
        import os, sys, time
        from trcomp.contract.proctree import TreeProcess
        sleeper = [sys.executable, "-c", "import time; time.sleep(600)", os.environ["MARKER"]]
        TreeProcess(sleeper)
        time.sleep(600)
    """)
    parent = subprocess.Popen([sys.executable, "-c", starter], env={**os.environ, "MARKER": marker})
    try:
        assert _wait(lambda: bool(_with_marker(marker)))
        parent.kill()  # SIGKILL: no handler, no cleanup code runs in the parent
        parent.wait(timeout=10)
        assert _wait(lambda: not _with_marker(marker)), "the child outlived its parent"
    finally:
        parent.kill()
        for pid in _with_marker(marker):
            os.kill(pid, signal.SIGKILL)
