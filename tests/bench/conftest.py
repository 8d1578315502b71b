"""Fixtures for the benchmark tests: small settings and a clean compiler environment."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

import pytest

from tests.helpers import vec_isa

# Variables that would point a measurement at the wrong compiler or cache.
_COMPILER_VARS = (
    "TRCOMP_CONFIG",
    "USE_TORCH_XLA",
    "PJRT_DEVICE",
    "TORCHINDUCTOR_CACHE_DIR",
    "XLA_PERSISTENT_CACHE_PATH",
)


# One intra-op thread in every process a test starts (the tests that build a child's
# environment themselves set it there too): on a loaded 2-core CI machine two
# threads per process wait on each other at every op (an eager step of a tiny
# model took 0.3 s instead of 1 ms). No test here is about threading.
ONE_THREAD = ("OMP_NUM_THREADS", "1")


@pytest.fixture
def trusted_isa(monkeypatch: pytest.MonkeyPatch) -> None:
    """The session's one check of inductor's CPU vector ISAs in this process's environment
    (which the children inherit), when it holds (tests/helpers/vec_isa.py): each child
    that compiles would start a Python that imports torch per ISA to check it."""
    for name, value in vec_isa.environment().items():
        monkeypatch.setenv(name, value)


@pytest.fixture
def clean_env(monkeypatch: pytest.MonkeyPatch) -> pytest.MonkeyPatch:
    """No compiler variables inherited from the developer's shell; one thread per child."""
    for name in _COMPILER_VARS:
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv(*ONE_THREAD)
    return monkeypatch


@pytest.fixture
def one_thread() -> Iterator[None]:
    """torch in this process on one intra-op thread (see ONE_THREAD), as it was after."""
    import torch

    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


def _fake_result(losses: list[float], first: float = 1.0, step: float = 0.01) -> dict[str, Any]:
    return {
        "device": "cpu:2t",
        "losses": losses,
        "first_step_s": first,
        "step_times_s": [step] * 4,
        "peak_mem_mb": 100.0,
        "startup_s": 0.5,
    }


@pytest.fixture
def fake_result() -> Callable[..., dict[str, Any]]:
    """Builds what a worker reports, without running one."""
    return _fake_result
