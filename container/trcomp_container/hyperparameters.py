"""Hyperparameters as the user wrote them, whichever SageMaker SDK sent them.

SageMaker stores every hyperparameter as a string. SDK v2 JSON-encodes every
value (``"lr": "0.001"``, ``"name": "\\"bert\\""``); SDK v3 sends a ``str``
unchanged and JSON-encodes the rest (``"name": "bert"``, ``"lr": "1e-3"`` when
the user wrote the string ``"1e-3"``). The training toolkit ``json.loads`` each
value and keeps the text when that fails, which turns the v3 string ``"1e-3"``
into the float ``0.001``. :func:`decode_value` decodes a value only when it is
exactly what ``json.dumps`` writes, which every v2 value and every non-string
v3 value is, and otherwise keeps the text as sent.

A name the toolkit cannot pass on (``=`` or NUL: it cannot be an environment
variable's, ``SM_HP_<NAME>``) is refused before anything starts (:func:`check_names`),
as the SDK refuses it at ``fit()``: a job started without the SDK gets the same
reason and exit code, not a trcomp internal error.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

from trcomp.contract.limits import unpassable
from trcomp_container.failures import ExitCode, JobFailed

__all__ = ["check_names", "decode_value", "read_stored", "user_args"]


def decode_value(stored: Any) -> Any:
    """The value a stored hyperparameter stands for (see the module docstring)."""
    if not isinstance(stored, str):
        return stored
    try:
        value = json.loads(stored)
    except ValueError:
        return stored
    return value if json.dumps(value) == stored else stored


def read_stored(path: Path) -> dict[str, Any]:
    """``hyperparameters.json`` as stored (``{}`` when the file is missing)."""
    if not path.is_file():
        return {}
    loaded = json.loads(path.read_text())
    return dict(loaded) if isinstance(loaded, Mapping) else {}


def user_args(stored: Mapping[str, Any], names: Iterable[str]) -> list[str]:
    """``--name value`` for the user's hyperparameters ``names``, as the toolkit lays them out."""
    from sagemaker_training import mapping

    values = {name: decode_value(stored[name]) for name in names if name in stored}
    return [str(arg) for arg in mapping.to_cmd_args(values)]


def check_names(names: Iterable[str]) -> None:
    """Raise :class:`~trcomp_container.failures.JobFailed` (the config exit code) for the
    first hyperparameter name the toolkit cannot pass to the script."""
    for name in names:
        why = unpassable(name)
        if why:
            raise JobFailed(
                f"hyperparameter name {name[:60]!r} {why}: the training toolkit passes every "
                "hyperparameter to the script as --name value and as the environment variable "
                "SM_HP_<NAME>, and no environment variable's name can hold that, so the script "
                "cannot be started. Rename the hyperparameter (for example with '_' instead) "
                "where the job is created (hyperparameters= of the estimator, HyperParameters "
                "of CreateTrainingJob, or hyperparameters.json), or pass the setting in a "
                "config file inside source_dir.",
                ExitCode.CONFIG,
            )
