"""Shared test setup: a quiet, offline SageMaker SDK and no stray AWS settings."""

from __future__ import annotations

import os
from collections.abc import Iterator
from typing import Any

import pytest

os.environ.setdefault("SAGEMAKER_SUPPRESS_V2_WARNING", "1")

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
