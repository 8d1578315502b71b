"""The compile trcomp turns on through Accelerate, checked and filed as trcomp's own.

For inductor jobs the entrypoint exports ``ACCELERATE_DYNAMO_BACKEND=INDUCTOR``
(and the config's mode, fullgraph, dynamic and regional choices as
``ACCELERATE_DYNAMO_*``: trcomp_container.backends.inductor), so an unmodified
Hugging Face Trainer or Accelerate script compiles its model in
``Accelerator.prepare``, with Accelerate's own ``torch.compile`` call (whole
model, or each repeated block with regional compilation). Without this module
the hook would find an ``OptimizedModule`` it did not make, file it "by the
script" and never check it.

While the hook runs, ``torch.compile`` is wrapped: a call from Accelerate's own
code (a caller whose module is ``accelerate`` or under it) with trcomp's
backend hands the module it returns to the hook, which compiles it again through
the checked backend before anything was traced (:func:`.calls.adopt`), filed
:data:`BY_ACCELERATE`. Every other call (the script's own ``torch.compile``, or
Accelerate asked by the script for another backend) passes through untouched and
stays "by the script". The wrapper is undone when the hook closes.

Not covered: Accelerate's in-place ``module.compile()`` paths (FSDP2 and DeepSpeed
regional compilation) run as Accelerate makes them, unchecked.
Standard library only at import.
"""

from __future__ import annotations

import functools
import os
import sys
from collections.abc import Callable
from typing import Any

__all__ = ["BACKEND_ENV", "BY_ACCELERATE", "watch"]

BACKEND_ENV = "ACCELERATE_DYNAMO_BACKEND"
"""The variable the entrypoint sets for inductor jobs (Accelerate reads it)."""
BY_ACCELERATE = "trcomp, through Accelerate"
"""Who compiled a model Accelerate compiled because trcomp asked it to."""


def watch(torch: Any, adopt: Callable[[Any], None]) -> Callable[[], None]:
    """Wrap ``torch.compile`` so that Accelerate's compile of trcomp's backend goes to
    ``adopt``; returns the undo (nothing to undo when trcomp did not turn Accelerate's
    compile on)."""
    if os.environ.get(BACKEND_ENV, "").strip().upper() != "INDUCTOR":
        return lambda: None
    original = torch.compile

    @functools.wraps(original)
    def compile(*args: Any, **kwargs: Any) -> Any:
        result = original(*args, **kwargs)
        if _accelerate_asked(sys._getframe(1), args, kwargs) and _optimized(torch, result):
            adopt(result)
        return result

    torch.compile = compile

    def undo() -> None:
        if torch.compile is compile:
            torch.compile = original

    return undo


def _accelerate_asked(frame: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> bool:
    module = frame.f_globals.get("__name__", "") if frame is not None else ""
    from_accelerate = module == "accelerate" or module.startswith("accelerate.")
    return from_accelerate and bool(args) and kwargs.get("backend", "inductor") == "inductor"


def _optimized(torch: Any, result: Any) -> bool:
    return isinstance(result, torch.nn.Module) and hasattr(result, "_orig_mod")
