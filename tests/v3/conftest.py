"""Fixtures for the SageMaker SDK v3 tests: run them in .venv-v3 with `make test-v3`.

In the v2 environment (`make test`) every module here skips: the SDK v3 is not
installed there, and cannot be (it replaces the v2 SDK's `sagemaker` package).
"""

from __future__ import annotations

import shutil
from collections.abc import Iterator
from pathlib import Path

import pytest

TESTS = Path(__file__).resolve().parents[1]


@pytest.fixture
def source_dir(tmp_path: Path) -> Path:
    """A source dir with the container tests' scripts (loop.py, ddp.py, probe_env.py)."""
    target = tmp_path / "src"
    shutil.copytree(TESTS / "container" / "scripts", target)
    return target


@pytest.fixture
def clean_sdk_env(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """No SDK config override or image override from the developer's shell."""
    for name in ("SAGEMAKER_USER_CONFIG_OVERRIDE", "TRCOMP_IMAGE_URI", "TRCOMP_LOCAL_IMAGE"):
        monkeypatch.delenv(name, raising=False)
    yield
