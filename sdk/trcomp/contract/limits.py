"""SageMaker's limits on hyperparameters, checked before a job is submitted.

Besides SageMaker's own (name and value length, count), a name the training
toolkit cannot pass on: it gives the script every hyperparameter twice, as
``--name value`` and as the environment variable ``SM_HP_<NAME>``, and no
environment variable's name holds ``=`` or a NUL character (``os.environ``
and ``execve`` refuse them). SageMaker accepts such a name; the toolkit fails
the job before the script starts, in an AWS framework container as in trcomp's.
Every other name (spaces, dots, dashes, non-ASCII letters) passes as it does there.
"""

from __future__ import annotations

from collections.abc import Mapping

from trcomp.contract.errors import HyperparameterLimitError

__all__ = ["MAX_COUNT", "MAX_KEY_LENGTH", "MAX_VALUE_LENGTH", "check_limits", "unpassable"]

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
        why = unpassable(key)
        if why:
            raise HyperparameterLimitError(
                f"hyperparameter name {key[:60]!r} in {what} {why}: the training toolkit "
                "passes every hyperparameter to the script as --name value and as the "
                "environment variable SM_HP_<NAME>, and no environment variable's name can "
                "hold that, so the job would fail before the script starts. Rename it (for "
                "example with '_' instead), or pass the setting in a config file inside "
                "source_dir"
            )
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


def unpassable(name: str) -> str:
    """Why the toolkit cannot pass the hyperparameter ``name`` to a script ("" when it can)."""
    if "=" in name:
        return "holds '='"
    if "\0" in name:
        return "holds a NUL character"
    try:
        name.encode("utf-8")
    except UnicodeEncodeError:
        return "holds a character that is not valid Unicode text (a lone surrogate)"
    return ""
