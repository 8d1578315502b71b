"""Run a Python child under the start-up hook (trcomp_container/hook/), as a job does.

Jobs put the hook directory on ``PYTHONPATH`` so Python runs its ``sitecustomize``,
which starts :mod:`trcomp_container.inprocess`. Tests do the same for a child process.
The package itself is imported in the tests' own process like any other.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from tests.helpers import forkserver
from trcomp_container.environment import HOOK_DIR

# The hook imports ``trcomp_container`` and ``trcomp``: the child takes them from this
# checkout, as a job does (tests/helpers/jobs.py), not from whichever copy the
# interpreter has installed.
_REPO = Path(__file__).resolve().parents[2]
_CHECKOUT = [str(_REPO / "sdk"), str(_REPO / "container")]

__all__ = ["CHECKOUT", "run_hooked"]

CHECKOUT = _CHECKOUT


def run_hooked(
    tmp_path: Path,
    code: str,
    extra_path: str = "",
    extra_env: dict[str, str] | None = None,
    *,
    fork: bool = False,
) -> subprocess.CompletedProcess[str]:
    """Run ``code`` in a Python child with the hook on, as rank 3, metrics under tmp_path.

    ``fork``: the child is forked from the session's zygote, the hook started as
    ``sitecustomize`` would (tests/helpers/forkserver.py ``run_python``), for a test about
    what the hook does once started; the hook's own start (an import order, another
    ``sitecustomize``) is tested in a new interpreter, the default.
    """
    env = {k: v for k, v in os.environ.items() if not k.startswith("TRCOMP_")}
    env.update(extra_env or {})
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(HOOK_DIR), extra_path, *_CHECKOUT]))
    env["TRCOMP_METRICS_DIR"] = str(tmp_path / "ranks")
    env["RANK"] = "3"
    if fork:
        return forkserver.run_python(["-c", code], env, capture_output=True, text=True)
    return subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True)
