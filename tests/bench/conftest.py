"""Fixtures for the benchmark tests: small settings and a clean compiler environment."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

# Variables that would point a measurement at the wrong compiler or cache.
_COMPILER_VARS = (
    "TRCOMP_CONFIG",
    "USE_TORCH_XLA",
    "PJRT_DEVICE",
    "TORCHINDUCTOR_CACHE_DIR",
    "XLA_PERSISTENT_CACHE_PATH",
)


@pytest.fixture
def clean_env(monkeypatch: pytest.MonkeyPatch) -> pytest.MonkeyPatch:
    """No compiler variables inherited from the developer's shell."""
    for name in _COMPILER_VARS:
        monkeypatch.delenv(name, raising=False)
    return monkeypatch


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
