"""A forward that compiling would unroll into one very large graph, found before it compiles.

Dynamo traces a Python loop by unrolling it: a recurrent cell called once per
time step over a long sequence becomes one graph holding a copy of the cell per
step. On this project's CPU machine an ``LSTMCell`` over 999 steps traced into
8008 nodes in 65 s; inductor then compiled for 25 minutes in about 8 GB and
failed with a RecursionError, for a job that trains eager in 4 minutes.

The hook compiles a module at the pre-hook of its first training call, which
then runs eager; while it runs, the hook's global forward pre-hook counts the
calls of each submodule (:class:`Census`). A submodule with parameters called
more than :data:`MAX_REPEATS` times in that one forward is the body of such a
loop: the module is never traced, runs eager, and the reason names the
submodule and its count. Nothing runs for the count but the script's own call.
A shared block called a few times (weight tying, an ALBERT-style stack) stays
well under it; a loop over plain tensor operations with no module in it is not
seen.
"""

from __future__ import annotations

from typing import Any

__all__ = ["MAX_REPEATS", "Census", "loop_reason"]

MAX_REPEATS = 64
"""Calls of one submodule with parameters in one forward beyond which it is a loop's body."""


class Census:
    """The calls of each submodule during one outermost call (the hook's pre-hook counts)."""

    def __init__(self) -> None:
        self.counts: dict[int, int] = {}

    def count(self, module: Any) -> None:
        self.counts[id(module)] = self.counts.get(id(module), 0) + 1


def loop_reason(module: Any, census: Census) -> str | None:
    """Why compiling ``module`` would unroll a long loop, from the calls ``census`` counted
    during its call; None when nothing says so."""
    subs = {id(sub): (name, sub) for name, sub in module.named_modules() if sub is not module}
    loops = [
        (calls, *subs[key])
        for key, calls in census.counts.items()
        if calls > MAX_REPEATS and key in subs and any(True for _ in subs[key][1].parameters())
    ]
    if not loops:
        return None
    calls, name, sub = max(loops, key=lambda loop: loop[0])
    return (
        f"its forward calls {name} ({type(sub).__name__}) {calls} times in one call (more "
        f"than {MAX_REPEATS}): a Python loop that compiling unrolls into one graph with "
        f"{calls} copies, too large to compile in reasonable time"
    )
