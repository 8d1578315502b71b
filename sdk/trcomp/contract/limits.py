"""SageMaker's limits on hyperparameters, checked before a job is submitted."""

from __future__ import annotations

from collections.abc import Mapping

from trcomp.contract.errors import HyperparameterLimitError

__all__ = ["MAX_COUNT", "MAX_KEY_LENGTH", "MAX_VALUE_LENGTH", "check_limits"]

MAX_KEY_LENGTH = 256
MAX_VALUE_LENGTH = 2500
MAX_COUNT = 100


def check_limits(hyperparameters: Mapping[str, str], what: str = "the job") -> None:
    """Raise :class:`HyperparameterLimitError` if SageMaker would refuse these values.

    ``hyperparameters`` are the encoded strings SageMaker stores.
    """
    if len(hyperparameters) > MAX_COUNT:
        raise HyperparameterLimitError(
            f"{what} has {len(hyperparameters)} hyperparameters; SageMaker accepts at most "
            f"{MAX_COUNT}: pass the rest in a config file inside source_dir"
        )
    for key, value in hyperparameters.items():
        if len(key) > MAX_KEY_LENGTH:
            raise HyperparameterLimitError(
                f"hyperparameter name {key[:40]!r}... in {what} is {len(key)} characters; "
                f"SageMaker accepts at most {MAX_KEY_LENGTH}: use a shorter name"
            )
        if len(value) > MAX_VALUE_LENGTH:
            raise HyperparameterLimitError(
                f"hyperparameter {key!r} in {what} is {len(value)} characters once encoded; "
                f"SageMaker accepts at most {MAX_VALUE_LENGTH}: shorten it (for the compiler "
                "config: fewer xla_flags or inductor_options)"
            )
