"""Known ways an unchanged script fails under a compiler, and the one change that fixes each.

Matched on the exception the script raised (its type and a fixed phrase of its
message, as recorded by the metrics hook), never on file names in a traceback.
"""

from __future__ import annotations

from dataclasses import dataclass

from trcomp_container.inprocess.record import ErrorReport

__all__ = ["HINTS", "Hint", "hint_for"]


@dataclass(frozen=True)
class Hint:
    """One known failure: where it happens and what to change."""

    backend: str | None
    error_type: str
    phrase: str
    change: str


HINTS: tuple[Hint, ...] = (
    Hint(
        backend="xla",
        error_type="RuntimeError",
        phrase="`fused=True` requires all the params",
        change=(
            "fused optimizers do not run on XLA devices: with the HF Trainer set "
            "TrainingArguments(optim='adamw_torch') (hyperparameter --optim adamw_torch); "
            "in your own loop create the optimizer with fused=False"
        ),
    ),
    Hint(
        backend="inductor",
        error_type="Unsupported",
        phrase="",
        change=(
            "fullgraph=True turned a graph break into an error: set fullgraph=False, or "
            "remove the Python construct the message names from the model's forward"
        ),
    ),
)


def hint_for(backend: str | None, error: ErrorReport) -> str | None:
    """The change that fixes ``error`` (a rank record's) under ``backend``, if known."""
    for hint in HINTS:
        if hint.backend not in (None, backend) or error.type != hint.error_type:
            continue
        if hint.phrase in str(error.message):
            return hint.change
    return None
