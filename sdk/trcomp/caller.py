"""Warnings that point at the user's line, not at trcomp's or the SageMaker SDK's.

A warning raised deep in an estimator's constructor must show the
``PyTorch(...)`` line of the user's script, or nobody finds what to change.
"""

from __future__ import annotations

import os
import sys
import warnings
from pathlib import Path

__all__ = ["warn_at_caller"]

_TRCOMP_DIR = str(Path(__file__).resolve().parent)


def _library_dirs() -> tuple[str, ...]:
    # The SageMaker SDK (v3's sagemaker is a namespace package: no __file__, several
    # paths) and pydantic, which calls v3 ModelTrainer's checks from its __init__.
    dirs = [_TRCOMP_DIR]
    for name in ("sagemaker", "pydantic"):
        module = sys.modules.get(name)
        if module is not None:
            dirs.extend(str(Path(path).resolve()) for path in getattr(module, "__path__", []))
    return tuple(directory + os.sep for directory in dirs)


def warn_at_caller(message: str, category: type[Warning]) -> None:
    """``warnings.warn`` pointing at the first frame outside trcomp and the SageMaker SDK.

    The user's line (``PyTorch(...)`` in their script) is what the warning must
    show, however deep in trcomp it is raised.
    """
    libraries = _library_dirs()
    level = 2  # 1 is this line; 2 is our caller
    frame = sys._getframe(1)
    while frame.f_back is not None:
        if not os.path.realpath(frame.f_code.co_filename).startswith(libraries):
            break
        frame = frame.f_back
        level += 1
    warnings.warn(message, category, stacklevel=level)
