"""The exceptions and warnings trcomp raises.

Every error subclasses :class:`TrcompError`, which is also a :class:`ValueError`,
so code written against the AWS SDK's ``except ValueError`` keeps working.
Every message says what is wrong, why, and the one thing to do next.
"""

from __future__ import annotations

__all__ = [
    "CompilerConfigError",
    "CompilerConfigWarning",
    "HyperparameterLimitError",
    "LocalModeError",
    "TrcompError",
    "UnsupportedJobError",
]


class TrcompError(ValueError):
    """Base class of every trcomp error."""


class CompilerConfigError(TrcompError):
    """A ``TrainingCompilerConfig`` field, or its serialized form, is invalid."""


class UnsupportedJobError(TrcompError):
    """The estimator asks for something the compiler cannot do (instance, distribution)."""


class HyperparameterLimitError(TrcompError):
    """A hyperparameter breaks a SageMaker limit (key or value length, count)."""


class LocalModeError(TrcompError):
    """Local mode (Docker or process mode) cannot start; the message says how to fix it."""


class CompilerConfigWarning(UserWarning):
    """Something will run but probably not as the user hopes (CPU instance, debugger on)."""
