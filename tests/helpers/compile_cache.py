"""One warm inductor compile cache for the test jobs that do not test a cold compile.

Most test jobs compile the same few graphs (the loop, the corpus scripts); only a
few test what a cold compile or the job's own cache does. The jobs that only
need *a* compiled model point ``TORCHINDUCTOR_CACHE_DIR`` at this directory
(fixture ``warm_compile_cache`` in tests/conftest.py), so each graph is compiled
once per key and loaded after that, by both pytest-xdist workers and, while the
key holds, by later runs on this machine.

The key (:func:`key`) is what changes compiled output beyond what inductor's own
cache key already holds (the FX graph, inductor's config, torch's version): the
torch and Python versions and the text of trcomp's container package and
runtime, whose start-up hook patches how inductor compiles. A new key gets a
new, empty directory (older ones of the same torch version are removed). The directory is
``<root>/<key>``, the root :func:`default_root` (outside the checkout: a clean clone
whose key an earlier run on the machine had starts warm) unless
``TRCOMP_TEST_COMPILE_CACHE_ROOT`` names another;
``TRCOMP_TEST_COMPILE_CACHE=session`` makes a fresh one for the run (deleted
after it), ``=<dir>`` uses that directory as it is.

Tests that test a cold compile or the job's own cache are marked
``cold_compile`` and keep their own empty directories.

Inductor's precompiled headers (``precompiled_headers/*.h.gch``, 123 MB each on torch
2.9) are the exception to "loaded after that": each run from a clone in another folder
wrote two new ones beside the old, about 240 MB a run. :func:`prune_headers` removes
those no session has read or written for :data:`HEADER_KEEP_S`; a header inductor
then misses it builds again (the tests' g++ wrapper hands the build back).
"""

from __future__ import annotations

import hashlib
import importlib.metadata
import os
import shutil
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
ENV = "TRCOMP_TEST_COMPILE_CACHE"
ROOT_ENV = "TRCOMP_TEST_COMPILE_CACHE_ROOT"
# trcomp code that runs inside a compiling job and can change what it compiles.
KEYED = [REPO / "container" / "trcomp_container", REPO / "sdk" / "trcomp" / "runtime"]
HEADER_KEEP_S = 3 * 24 * 3600.0
"""Precompiled headers unread and unwritten this long are removed. Reading one updates
its access time at least once a day (Linux's default ``relatime``), so a header in use
is never this old."""


def default_root() -> Path:
    """``$XDG_CACHE_HOME/trcomp-tests/compile-cache`` (``~/.cache`` without it): outside the
    checkout, so a new clone of the same code on this machine starts warm, as pip's
    download cache does for its installs."""
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base, "trcomp-tests", "compile-cache")


def key() -> str:
    digest = hashlib.sha256()
    try:
        torch = importlib.metadata.version("torch")
    except importlib.metadata.PackageNotFoundError:
        torch = "none"
    digest.update(f"torch {torch}\npython {sys.version}\n".encode())
    for root in KEYED:
        for path in sorted(root.rglob("*.py")):
            digest.update(str(path.relative_to(REPO)).encode() + b"\0" + path.read_bytes())
    return f"torch-{torch.split('+')[0]}-{digest.hexdigest()[:16]}"


def configure() -> Path | None:
    """In the controller: choose the directory and export it for the workers.

    Returns a directory to delete when the session ends (``=session``), else None.
    """
    setting = os.environ.get(ENV, "")
    if setting and setting != "session":
        Path(setting).mkdir(parents=True, exist_ok=True)
        return None
    if setting == "session":
        made = Path(tempfile.mkdtemp(prefix="trcomp-compile-cache-"))
        os.environ[ENV] = str(made)
        return made
    root = Path(os.environ.get(ROOT_ENV) or default_root())
    target = root / key()
    # One directory per torch version: make test-214 may run beside make test (.ci/run).
    prefix = target.name.rsplit("-", 1)[0] + "-"
    if root.exists():
        for old in root.iterdir():
            if old != target and old.name.startswith(prefix):
                shutil.rmtree(old, ignore_errors=True)
    target.mkdir(parents=True, exist_ok=True)
    prune_headers(target)
    os.environ[ENV] = str(target)
    return None


def prune_headers(cache: Path, keep_s: float = HEADER_KEEP_S) -> list[Path]:
    """Remove the precompiled headers in ``cache`` (each ``.h.gch`` with its ``.h``) that
    were neither read nor written for ``keep_s`` seconds; returns what was removed."""
    cutoff = time.time() - keep_s
    removed: list[Path] = []
    for built in sorted((cache / "precompiled_headers").glob("*.h.gch")):
        try:
            stat = built.stat()
            if max(stat.st_atime, stat.st_mtime) >= cutoff:
                continue
            for path in (built, built.with_suffix("")):  # x.h.gch, then x.h
                path.unlink(missing_ok=True)
                removed.append(path)
        except OSError:  # another session removed it first: nothing to do
            continue
    return removed


def directory() -> Path:
    """The warm cache of this session (set by :func:`configure` in the controller)."""
    return Path(os.environ[ENV])
