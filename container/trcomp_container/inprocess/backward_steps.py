"""The step of a loop that steps no torch.optim optimizer: one backward pass through the model.

A loop that updates its weights by hand (``p.data.add_(p.grad, alpha=-lr)``: pytorch/examples'
regression and word_language_model) never calls an optimizer's ``step``, so the
session's step count, the speed-up windows and the keep-faster decision never
start. Such a loop still calls ``backward`` once per step, and each backward pass
accumulates a gradient into every trained parameter once. A post-accumulate-grad
hook on one trained parameter of the model counts them; after
:data:`BACKWARDS_BEFORE_STEPS` passes without an optimizer step (longer than any
usual gradient accumulation), each pass is the loop's step. The hook is removed at
the first optimizer step, and when the session closes (the ledger): the script's
parameter keeps no hook. Adding or removing it compiles nothing again (dynamo does
not guard on a parameter's post-accumulate-grad hooks; torch 2.9, aot_eager).

Standard library only at import.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from trcomp_container.inprocess.ledger import Ledger

__all__ = ["BACKWARDS_BEFORE_STEPS", "WATCH", "BackwardSteps"]

BACKWARDS_BEFORE_STEPS = 8
"""Backward passes without an optimizer step before each pass counts as the loop's step."""
WATCH = "backward steps: a post-accumulate-grad hook on one trained parameter"
"""The ledger's name for the hook."""


class BackwardSteps:
    """Counts the backward passes that reach one trained parameter of the model.

    ``on_backward`` is called after each (in the autograd engine, once the parameter's
    gradient is accumulated: the step's forward is over, its next one not begun).
    """

    def __init__(self, ledger: Ledger, on_backward: Callable[[], None]) -> None:
        self._ledger = ledger
        self._on_backward = on_backward
        self.watching = False
        self.passes = 0

    def watch(self, module: Any) -> bool:
        """Hook the first trained parameter of ``module``; False when it has none."""
        if self.watching:
            return True
        param = next((p for p in module.parameters() if p.requires_grad), None)
        if param is None or not hasattr(param, "register_post_accumulate_grad_hook"):
            return False
        handle = param.register_post_accumulate_grad_hook(self._accumulated)
        self._ledger.record(WATCH, handle.remove)
        self.watching = True
        return True

    def stop(self) -> None:
        """Remove the hook (the loop steps an optimizer: its steps are counted instead)."""
        if self.watching:
            self._ledger.undo(WATCH)
            self.watching = False

    def _accumulated(self, param: Any) -> None:
        self.passes += 1
        self._on_backward()
