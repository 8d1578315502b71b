"""Shared test setup: a quiet, offline SageMaker SDK and no stray AWS settings."""

from __future__ import annotations

import os

import pytest

os.environ.setdefault("SAGEMAKER_SUPPRESS_V2_WARNING", "1")

ROLE = "arn:aws:iam::111122223333:role/SageMakerRole"


@pytest.fixture
def role() -> str:
    """An IAM role ARN for estimators that never reach AWS."""
    return ROLE


@pytest.fixture
def offline_session(monkeypatch: pytest.MonkeyPatch):
    """A SageMaker Session with a region and no network use (no STS, no S3)."""
    import boto3
    import sagemaker

    monkeypatch.setenv("AWS_DEFAULT_REGION", "eu-west-1")
    return sagemaker.Session(boto_session=boto3.Session(region_name="eu-west-1"))
