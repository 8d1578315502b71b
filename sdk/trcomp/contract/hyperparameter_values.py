"""Values in a job's hyperparameters: decoding them, and showing them in error messages.

SageMaker stores every hyperparameter as a JSON string; :mod:`trcomp.contract.config`
reads the compiler's back with these. Standard library only.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from trcomp.contract.errors import CompilerConfigError

__all__ = ["SHOWN_CHARS", "decode", "decode_bool", "decode_object", "shown", "shown_json"]

SHOWN_CHARS = 80
"""Values echoed in error messages are cut to this many characters."""


def shown(value: Any) -> str:
    """``repr(value)``, cut to a readable length (a value may be megabytes long)."""
    text = repr(value)
    if len(text) <= SHOWN_CHARS:
        return text
    return f"{text[: SHOWN_CHARS - 20]}... ({len(text):,} characters)"


def shown_json(value: Any) -> str:
    try:
        text = json.dumps(value)
    except (TypeError, ValueError):
        return shown(value)
    return text if len(text) <= SHOWN_CHARS else shown(value)


def decode(value: Any, key: str) -> Any:
    # SageMaker stores every value as a JSON string. The toolkit (and the SDK's
    # attach) json.loads each value once, so a value arrives either decoded or,
    # read from the stored hyperparameters, encoded once: one json.loads covers
    # both. A str that is not JSON stays as it is ("false" from a decoded '"false"').
    if not isinstance(value, str):
        return value
    try:
        return json.loads(value)
    except json.JSONDecodeError:
        return value
    except RecursionError:  # brackets nested deeper than any config is
        raise CompilerConfigError(
            f"hyperparameter {key} is nested too deeply to be a compiler config "
            f"({shown(value)}): let the estimator write it from a TrainingCompilerConfig"
        ) from None


def decode_bool(mapping: Mapping[str, Any], key: str) -> bool | None:
    if key not in mapping:
        return None
    value = decode(mapping[key], key)
    if isinstance(value, bool):
        return value
    if isinstance(value, str) and value.lower() in ("true", "false"):
        return value.lower() == "true"
    raise CompilerConfigError(
        f"hyperparameter {key} is {shown(mapping[key])}; it must be 'true' or 'false'"
    )


def decode_object(mapping: Mapping[str, Any], key: str) -> dict[str, Any] | None:
    if key not in mapping:
        return None
    value = decode(mapping[key], key)
    if not isinstance(value, dict):
        raise CompilerConfigError(
            f"hyperparameter {key} must be a JSON object, got {shown(mapping[key])}: "
            "let the estimator write it from a TrainingCompilerConfig"
        )
    return dict(value)
