"""The session's cache of inductor's C++ kernel builds (tests/helpers/cxx/g++).

The wrapper is first on ``PATH`` for the whole session (tests/conftest.py), so every
child that inherits the tests' environment builds through it. A child given an
environment of its own (``PATH=/usr/bin:/bin``, as the benchmark harness's tests give
theirs) gets the wrapper back with :func:`environment`; without it, each of its kernels
and its precompiled header ran the real g++ (20 CPU-seconds for the GPU script's
zero-code run, docs/timings.md).
"""

from __future__ import annotations

import os
import sys
import time
from pathlib import Path

WRAPPERS = Path(__file__).resolve().parent / "cxx"
CACHE_ENV = "CXX_CACHE_DIR_FOR_TESTS"
LOG_ENV = "CXX_CACHE_LOG_FOR_TESTS"
PYTHON_ENV = "CXX_WRAPPER_PYTHON_FOR_TESTS"  # the interpreter that runs the wrapper
KEEP_S = 14 * 24 * 3600  # builds unused this long are removed at a session's start


def configure(cache: Path, log: Path) -> None:
    """Put the wrapper first on this process's ``PATH`` (its children inherit it), its
    builds kept in ``cache`` and this session's count in ``log``."""
    os.environ[CACHE_ENV] = str(cache)
    os.environ[LOG_ENV] = str(log)
    os.environ[PYTHON_ENV] = getattr(sys, "_base_executable", sys.executable)
    os.environ["PATH"] = f"{WRAPPERS}{os.pathsep}{os.environ.get('PATH', '')}"


def environment(path: str) -> dict[str, str]:
    """``PATH`` (``path`` behind the wrapper) and the wrapper's variables, for a child
    given an environment of its own; just ``PATH`` when the session has no cache."""
    if CACHE_ENV not in os.environ:
        return {"PATH": path}
    names = (CACHE_ENV, LOG_ENV, PYTHON_ENV)
    return {"PATH": f"{WRAPPERS}{os.pathsep}{path}"} | {n: os.environ[n] for n in names}


def prune(cache: Path, keep_s: float) -> None:
    """Remove the builds no session has used for ``keep_s`` seconds (a hit touches its
    ``.seconds`` file; a build and its ``.seconds`` share a name)."""
    cutoff = time.time() - keep_s
    for seconds in cache.glob("*.seconds"):
        try:
            if seconds.stat().st_mtime < cutoff:
                for build in cache.glob(seconds.stem + ".*"):
                    build.unlink(missing_ok=True)
        except OSError:
            pass
