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
    "JobInterrupted",
    "JobTerminated",
    "LocalJobFailed",
    "LocalModeError",
    "SharedCacheError",
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
    """A hyperparameter breaks a SageMaker limit (key or value length, count), or has a name
    the training toolkit cannot pass to the script (one holding ``=``)."""


class LocalModeError(TrcompError):
    """Local mode (Docker or process mode) cannot start; the message says how to fix it."""


class LocalJobFailed(LocalModeError):
    """A local job ran and failed; ``exit_code`` is the job's exit code (None if unknown)."""

    def __init__(self, message: str, exit_code: int | None = None) -> None:
        super().__init__(message)
        self.exit_code = exit_code


class SharedCacheError(TrcompError):
    """The shared compile cache cannot be used (a bucket of another account, a bad location)."""


class JobInterrupted(KeyboardInterrupt):
    """Ctrl-C stopped a local job; what it saved was packed (see the message)."""

    def __init__(self, message: str, exit_code: int | None = None) -> None:
        super().__init__(message)
        self.exit_code = exit_code


class JobTerminated(SystemExit):
    """SIGTERM reached ``fit()``: the job was stopped and packed, and the process exits 143."""

    def __init__(self, message: str, exit_code: int | None = None, signum: int = 15) -> None:
        super().__init__(128 + signum)
        self.message = message
        self.exit_code = exit_code

    def __str__(self) -> str:
        return self.message


class CompilerConfigWarning(UserWarning):
    """Something will run but probably not as the user hopes (CPU instance, debugger on)."""
