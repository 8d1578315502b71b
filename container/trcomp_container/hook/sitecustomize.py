"""trcomp's start-up hook: starts the in-process package, then the next ``sitecustomize``.

The entrypoint puts this directory first on ``PYTHONPATH``, so Python imports
this module at start-up in every process of the job. Everything it does lives
in :mod:`trcomp_container.inprocess` (docs/architecture.md); this shim only
starts it, and then runs the next ``sitecustomize`` on the path (an image's
own), as if this one were not there.
"""

from __future__ import annotations

import importlib.machinery
import importlib.util
import os
import sys

__all__: list[str] = []


def _chain_next_sitecustomize() -> None:
    here = os.path.dirname(os.path.abspath(__file__))
    rest = [entry for entry in sys.path if os.path.abspath(entry or ".") != here]
    spec = importlib.machinery.PathFinder.find_spec("sitecustomize", rest)
    if spec is None or spec.loader is None:
        return
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)


try:  # start() reads the environment (TRCOMP_METRICS_DIR): without it the hook stays off
    from trcomp_container.inprocess import start

    start()
except Exception as exc:  # the shim's no-harm boundary: the script runs without the hook
    print(f"[trcomp] start-up hook disabled: {type(exc).__name__}: {exc}", file=sys.stderr)
_chain_next_sitecustomize()
