"""trcomp: one switch that compiles SageMaker-style PyTorch training jobs.

``import trcomp`` is cheap: the estimators (which import the SageMaker SDK) load
on first use, and torch is never imported here. ``TrainingCompilerConfig`` loads
on first use too, so the container, which imports only :mod:`trcomp.contract`,
never loads the SDK's checks.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

from trcomp._version import __version__
from trcomp.contract.errors import (
    CompilerConfigError,
    CompilerConfigWarning,
    HyperparameterLimitError,
    JobInterrupted,
    JobTerminated,
    LocalJobFailed,
    LocalModeError,
    TrcompError,
    UnsupportedJobError,
)

if TYPE_CHECKING:
    from trcomp.config import TrainingCompilerConfig
    from trcomp.estimators import Estimator, HuggingFace, PyTorch

__all__ = [
    "CompilerConfigError",
    "CompilerConfigWarning",
    "Estimator",
    "HuggingFace",
    "HyperparameterLimitError",
    "JobInterrupted",
    "JobTerminated",
    "LocalJobFailed",
    "LocalModeError",
    "PyTorch",
    "TrainingCompilerConfig",
    "TrcompError",
    "UnsupportedJobError",
    "__version__",
]

_LAZY = {
    "PyTorch": "trcomp.estimators",
    "HuggingFace": "trcomp.estimators",
    "Estimator": "trcomp.estimators",
    "TrainingCompilerConfig": "trcomp.config",
}


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        return getattr(importlib.import_module(_LAZY[name]), name)
    raise AttributeError(f"module 'trcomp' has no attribute {name!r}")
