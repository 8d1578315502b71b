"""A wall-clock budget for work that may hang where no timeout reaches (a dead NFS mount).

:meth:`Budget.run` runs the work in a daemon thread and waits at most the
budget. When the budget is spent it stops waiting and cancels: the work may
stay blocked in its system call, but every change it makes to what the job
sees goes through :meth:`Budget.commit`, which refuses once cancelled. So the
job either sees a change whole or not at all, and never waits past the budget
(plus the end of one local commit). A daemon thread, not a thread pool: the
interpreter does not wait for it at exit.
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Callable, Iterator
from typing import Generic, TypeVar

__all__ = ["Budget", "Cancelled"]

T = TypeVar("T")


class Cancelled(BaseException):
    """Raised in the work's thread by :meth:`Budget.commit` once the budget is spent.

    A ``BaseException``, so the work's own ``except Exception`` does not swallow it.
    """


class _Outcome(Generic[T]):
    def __init__(self) -> None:
        self.value: T | None = None
        self.error: BaseException | None = None


class Budget:
    """``seconds`` of wall-clock time for one piece of work (:meth:`run`)."""

    def __init__(self, seconds: float, *, name: str = "trcomp-budget") -> None:
        self.seconds = seconds
        self.name = name
        self.cancelled = False
        self._lock = threading.Lock()

    def run(self, work: Callable[[], T]) -> tuple[bool, T | None]:
        """``(True, result)`` when ``work`` ended in time, ``(False, None)`` when not.

        An exception ``work`` raised in time is raised here.
        """
        outcome: _Outcome[T] = _Outcome()

        def target() -> None:
            try:
                outcome.value = work()
            except Cancelled:
                pass
            except BaseException as exc:  # handed to the caller, not printed by threading
                outcome.error = exc

        thread = threading.Thread(target=target, name=self.name, daemon=True)
        thread.start()
        thread.join(self.seconds)
        with self._lock:
            if thread.is_alive():
                self.cancelled = True
                return False, None
        if outcome.error is not None:
            raise outcome.error
        return True, outcome.value

    @contextlib.contextmanager
    def commit(self) -> Iterator[None]:
        """Make a change the job sees; raises :class:`Cancelled` once the budget is spent."""
        with self._lock:
            if self.cancelled:
                raise Cancelled
            yield
