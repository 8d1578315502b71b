"""A forward that compiling would unroll into one very large graph, found before it compiles.

Dynamo traces a Python loop by unrolling it: a recurrent cell called once per
time step over a long sequence becomes one graph holding a copy of the cell per
step. On this project's CPU machine an ``LSTMCell`` over 999 steps traced into
8008 nodes in 65 s; inductor then compiled for 25 minutes in about 8 GB and
failed with a RecursionError, for a job that trains eager in 4 minutes.

Before a module's first checked call (:mod:`.verify`), its forward runs once
eager (its output dropped), from the call's buffers and random state (both put
back after), while a global forward pre-hook counts the calls of each
submodule. A submodule with parameters called more than :data:`MAX_REPEATS`
times in that one forward is the body of such a loop: the module stays eager,
and the reason names the submodule and its count. A shared block called a few
times (weight tying, an ALBERT-style stack) stays well under it; a loop over
plain tensor operations with no module in it is not seen.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from trcomp_container.inprocess.verify import put_back, state_of

__all__ = ["MAX_REPEATS", "unrolled_loop"]

MAX_REPEATS = 64
"""Calls of one submodule with parameters in one forward beyond which it is a loop's body."""


def unrolled_loop(
    torch: Any,
    module: Any,
    eager: Callable[..., Any],
    args: tuple[Any, ...],
    kwargs: dict[str, Any],
) -> str | None:
    """Why compiling ``module`` would unroll a long loop; None when nothing says so.

    Runs ``module``'s forward once through ``eager`` (its call, eager; output dropped;
    buffers and random state put back).
    An error of that run is left to the call that follows, which raises it or not.
    """
    counts: dict[int, int] = {}

    def count(sub: Any, _args: Any) -> None:
        counts[id(sub)] = counts.get(id(sub), 0) + 1

    before = state_of(torch, module)
    handle = torch.nn.modules.module.register_module_forward_pre_hook(count)
    try:
        # In the call's own grad mode: under autocast, a forward without gradients
        # would leave weight casts without a graph in autocast's cache, which the
        # script's forward in the same region then reuses (no gradient reaches them).
        eager(*args, **kwargs)
    except Exception:  # the real call runs next: its error, if any, is the script's
        return None
    finally:
        handle.remove()
        put_back(torch, module, before)
    subs = {id(sub): (name, sub) for name, sub in module.named_modules() if sub is not module}
    loops = [
        (calls, *subs[key])
        for key, calls in counts.items()
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
