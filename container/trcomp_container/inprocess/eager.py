"""The one holder of "run eager now": for the speed-up window and a keep-eager decision.

The hook's own compiled modules switch on their own (:attr:`EagerMode.hook_eager`,
read at each of their calls: no global state); a model the script compiled
needs torch's global compiler stance, which the session's ledger records with
its undo.
"""

from __future__ import annotations

from typing import Any

from trcomp_container.inprocess.ledger import Ledger

__all__ = ["EagerMode"]

_STANCE = "compiler stance force_eager"


class EagerMode:
    """Whether compiled modules run eager from the next step, and how that is done."""

    def __init__(self, torch: Any, ledger: Ledger) -> None:
        self._torch = torch
        self._ledger = ledger
        self.hook_eager = False
        """True: the hook's compiled modules call their eager code."""
        self.stance_eager = False
        """True: torch's compiler stance is ``force_eager`` (models the script compiled)."""

    @property
    def eager(self) -> bool:
        return self.hook_eager or self.stance_eager

    def set(self, eager: bool, *, through_stance: bool) -> None:
        """Run eager (or compiled again); ``through_stance``: the script compiled the model."""
        if not through_stance:
            self.hook_eager = eager
            return
        if eager == self.stance_eager:
            return
        if eager:
            self._torch.compiler.set_stance("force_eager")
            self._ledger.record(_STANCE, self._default_stance)
            self.stance_eager = True
        else:
            self._ledger.undo(_STANCE)

    def _default_stance(self) -> None:
        self._torch.compiler.set_stance("default")
        self.stance_eager = False
