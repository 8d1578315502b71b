"""Every change trcomp makes to the user's process, each with its undo.

The no-harm contract (docs/runtime.md) promises that trcomp leaves no global
state of the script's process changed. The session records each change it
installs here, with the function that takes it back; at close the ledger undoes
them all, newest first, and what is left listed is what stays by design (with
the reason). tests/container/inprocess/test_ledger.py compares torch's state
after close with a process that never ran the hook. Standard library only.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

__all__ = ["Change", "Ledger"]


@dataclass
class Change:
    """One change to the process: its name, its undo, or why it stays."""

    name: str
    undo: Callable[[], None] | None
    stays: str | None = None
    """Why the change is kept after close (by design); None: it is undone."""


class Ledger:
    """The changes in force, in the order they were made."""

    def __init__(self) -> None:
        self._changes: list[Change] = []
        self.undo_errors: list[str] = []

    def record(self, name: str, undo: Callable[[], None]) -> None:
        """A change made, and how to take it back."""
        self._changes.append(Change(name, undo))

    def keep(self, name: str, why: str) -> None:
        """A change that stays after close, by design, and why."""
        self._changes.append(Change(name, None, why))

    def undo(self, name: str) -> bool:
        """Take back the newest change called ``name`` now; False when none is in force."""
        for change in reversed(self._changes):
            if change.name == name and change.undo is not None:
                self._changes.remove(change)
                self._run(change)
                return True
        return False

    def close(self) -> list[Change]:
        """Undo every change, newest first; returns the ones that stay."""
        for change in reversed(list(self._changes)):
            if change.undo is not None:
                self._changes.remove(change)
                self._run(change)
        return list(self._changes)

    def in_force(self) -> list[str]:
        """The names of the changes in force now."""
        return [change.name for change in self._changes]

    def _run(self, change: Change) -> None:
        assert change.undo is not None
        try:
            change.undo()
        except Exception as exc:  # an undo that fails must not stop the others
            self.undo_errors.append(f"{change.name}: {type(exc).__name__}: {exc}")
