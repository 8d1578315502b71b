"""What every corpus script reports: its per-step losses and whether each ran compiled code.

Not a pattern: the helper the corpus scripts import (they run as ``python <script>``,
so this directory is on their ``sys.path``). Standard library only at import.

``step(*losses)`` records one training step: each loss's value and whether its
autograd graph holds a node of a compiled function (AOTAutograd's
``CompiledFunctionBackward``), which is the ground truth of "this step's forward
ran compiled code" that the hook's own record is checked against. A loss
without a graph (a float, an eval loss) records ``None``. ``check(**values)``
records what else must come out the same with the compiler off and on (eval
losses, reloaded outputs, running statistics). ``save()`` writes the report
to ``$CORPUS_OUT``, else to ``$SM_MODEL_DIR/corpus.json`` (a real job).
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

__all__ = ["Report", "ran_compiled"]


def ran_compiled(loss: Any) -> bool | None:
    """Whether ``loss``'s autograd graph went through compiled code (None: no graph)."""
    root = getattr(loss, "grad_fn", None)
    if root is None:
        return None
    seen: set[int] = set()
    stack = [root]
    while stack:
        node = stack.pop()
        if node is None or id(node) in seen:
            continue
        seen.add(id(node))
        if "CompiledFunction" in type(node).__name__:
            return True
        stack.extend(next_node for next_node, _ in node.next_functions)
    return False


class Report:
    """The per-step losses of one script, saved as JSON for the corpus test."""

    def __init__(self) -> None:
        self.losses: list[list[float]] = []
        self.compiled: list[list[bool | None]] = []
        self.checks: dict[str, list[float]] = {}
        self.notes: dict[str, Any] = {}

    def step(self, *losses: Any) -> None:
        """Record one step's losses (tensors or floats), before or after ``backward()``."""
        self.losses.append([float(loss) for loss in losses])
        self.compiled.append([ran_compiled(loss) for loss in losses])

    def check(self, **values: Any) -> None:
        """Record values (numbers or tensors) compared between the two runs, appended per name."""
        for name, value in values.items():
            flat = value.detach().flatten().tolist() if hasattr(value, "detach") else [value]
            self.checks.setdefault(name, []).extend(float(v) for v in flat)

    def save(self, **notes: Any) -> None:
        """Write the report; ``notes`` are whatever else the script checked."""
        self.notes.update(notes)
        target = os.environ.get("CORPUS_OUT") or str(
            Path(os.environ.get("SM_MODEL_DIR", ".")) / "corpus.json"
        )
        body = {
            "losses": self.losses,
            "compiled": self.compiled,
            "checks": self.checks,
            "notes": self.notes,
        }
        Path(target).write_text(json.dumps(body))
