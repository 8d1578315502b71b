"""Shared test setup: a quiet, offline SageMaker SDK and no stray AWS settings."""

from __future__ import annotations

import os
import shutil
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.helpers import compile_cache, cxx_cache, durations, forkserver, vec_isa

os.environ.setdefault("SAGEMAKER_SUPPRESS_V2_WARNING", "1")

_CXX_CACHE = pytest.StashKey[Path]()
_COMPILE_CACHE = pytest.StashKey[Path]()
_FORKSERVER = pytest.StashKey[Path]()


def pytest_configure(config: pytest.Config) -> None:
    """Record per-test durations, choose the warm compile cache
    (tests/helpers/compile_cache.py), check inductor's CPU vector ISA once for the session
    (tests/helpers/vec_isa.py), let idle OpenMP threads sleep, and put the kernel-build
    cache first on PATH for every job.

    Each test job compiles with its own empty compile cache, so inductor builds
    the same kernels again and again; the wrapper runs the real g++ once per
    distinct build (see its docstring for what a build's key holds), kept outside the
    clone for later sessions (``~/.cache/trcomp-tests/cxx``, builds unused for two weeks
    removed).
    ``TRCOMP_TEST_CXX_CACHE=off`` builds everything for real. xdist workers inherit
    the controller's setting. Durations: tests/helpers/durations.py.
    """
    durations.register(config)
    made = compile_cache.configure()
    if made is not None:
        config.stash[_COMPILE_CACHE] = made
    if not os.environ.get("PYTEST_XDIST_WORKER"):  # workers inherit the controller's
        vec_isa.probe(compile_cache.directory())
        # OpenMP threads that end a parallel region sleep at once instead of spinning for
        # the next: on two cores shared by three workers and their jobs, the spinning took
        # CPU the others needed (docs/timings.md). The thread count, so every result, is
        # the same. A value of the caller's own is kept.
        os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")
        if os.environ.get("TRCOMP_TEST_FORKSERVER") != "off":
            # A short path: it holds Unix sockets (tests/helpers/forkserver.py).
            forks = Path(tempfile.mkdtemp(prefix="trcomp-fs-"))
            config.stash[_FORKSERVER] = forks
            os.environ[forkserver.DIR_ENV] = str(forks)
    if os.environ.get("TRCOMP_TEST_CXX_CACHE") == "off" or cxx_cache.CACHE_ENV in os.environ:
        return
    cache = compile_cache.default_root().parent / "cxx"
    cache.mkdir(parents=True, exist_ok=True)
    cxx_cache.prune(cache, cxx_cache.KEEP_S)
    session = Path(tempfile.mkdtemp(prefix="trcomp-cxx-log-"))  # this session's count
    config.stash[_CXX_CACHE] = session
    cxx_cache.configure(cache, session / "builds.log")


def pytest_collection_finish(session: pytest.Session) -> None:
    """A process that runs torch tests (each xdist worker, or pytest without workers)
    checks inductor's CPU vector ISAs once, in forks of itself
    (tests/helpers/vec_isa.py), before its first in-process compile would."""
    config = session.config
    controller = not hasattr(config, "workerinput") and getattr(config.option, "numprocesses", 0)
    if not controller and "torch" in sys.modules and session.items:
        vec_isa.pick_in_this_process(compile_cache.directory())


def pytest_terminal_summary(terminalreporter: Any, config: pytest.Config) -> None:
    forks = config.stash.get(_FORKSERVER, None)
    zygotes, forked, alone = (0, 0, 0)
    if forks is not None and forks.exists():
        zygotes, forked, alone = forkserver.counts(forks)
    if zygotes + forked + alone:  # a run with no process-mode job says nothing
        terminalreporter.write_line(
            f"Python runs of test jobs (scripts, -m, -c; tests/helpers/forkserver.py): "
            f"{forked} forked from {zygotes} zygotes, {alone} run as their own process"
        )
    cache = config.stash.get(_CXX_CACHE, None)
    log = cache / "builds.log" if cache is not None else None
    if log is None or not log.exists():
        return
    runs = [line.split() for line in log.read_text().splitlines()]
    built = [float(r[1]) for r in runs if r[0] == "miss" and len(r) > 1]
    reused = [float(r[1]) for r in runs if r[0] == "hit" and len(r) > 1]
    terminalreporter.write_line(
        f"C++ kernel builds (tests/helpers/cxx): {len(built)} run by g++ "
        f"({sum(built):.0f} s), {len(reused)} reused (their builds took {sum(reused):.0f} s)"
    )


def pytest_unconfigure(config: pytest.Config) -> None:
    for key in (_CXX_CACHE, _COMPILE_CACHE, _FORKSERVER):  # the zygotes see theirs go
        cache = config.stash.get(key, None)
        if cache is not None:
            shutil.rmtree(cache, ignore_errors=True)


@pytest.fixture(scope="session")
def warm_compile_cache() -> Path:
    """The session's shared inductor cache (``TORCHINDUCTOR_CACHE_DIR`` for a job that
    needs a compiled model, not a cold compile): tests/helpers/compile_cache.py."""
    return compile_cache.directory()


ROLE = "arn:aws:iam::111122223333:role/SageMakerRole"
REGION = "eu-west-1"


@pytest.fixture
def role() -> str:
    """An IAM role ARN for estimators that never reach AWS."""
    return ROLE


@pytest.fixture(scope="session")
def _shared_offline_session() -> Iterator[Any]:
    """One SageMaker Session for the whole run.

    Building one loads boto3's service models (about a second each here). Tests only
    read it; ``monkeypatch.setattr`` on it is undone after each test. Checked at the
    end: no test left an attribute of it changed.
    """
    import boto3
    import sagemaker

    with pytest.MonkeyPatch.context() as env:
        # Built offline whichever test asks first: no emulator endpoint, profile or keys.
        for name in [n for n in os.environ if n.startswith("AWS_")]:
            env.delenv(name)
        session = sagemaker.Session(boto_session=boto3.Session(region_name=REGION))
    before = dict(vars(session))
    yield session
    changed = sorted(
        k for k in {*before, *vars(session)} if vars(session).get(k) is not before.get(k)
    )
    assert not changed, f"a test changed the shared offline_session: {changed}"


@pytest.fixture
def offline_session(_shared_offline_session: Any, monkeypatch: pytest.MonkeyPatch) -> Any:
    """A SageMaker Session with a region and no network use (no STS, no S3).

    Shared by every test (session-scoped underneath): a test that changes the session
    itself builds its own.
    """
    monkeypatch.setenv("AWS_DEFAULT_REGION", REGION)
    return _shared_offline_session
