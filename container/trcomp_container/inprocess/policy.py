"""Which module the zero-code path compiles: the outermost one being trained.

A module called at the outermost level is compiled, in place, when it is

- in training mode (``module.training``), with gradients enabled,
- has parameters with ``requires_grad`` (it is being trained), all of them
  initialized (a lazy module is looked at again once materialized),
- not compiled by the script itself (``torch.compile(model)``,
  ``model.compile()``, ``trcomp.runtime.compile``, HF Trainer/Accelerate),
- not wrapped in ``nn.DataParallel`` (its replicas would all run the original
  module's compiled code) nor sharded with FSDP1 (:mod:`.fsdp`).

Pure functions of the module and torch; standard library only at import.
"""

from __future__ import annotations

from typing import Any

from trcomp_container.inprocess import fsdp, torch_compat
from trcomp_container.inprocess.speedup.key import module_signature

__all__ = ["REENTRANT", "SCRIPT_COMPILED", "candidate_reason", "module_signature", "wrapped_by_ddp"]

SCRIPT_COMPILED = "compiled by the script"
REENTRANT = (
    "eval mode",
    "called with gradients disabled",
    "uninitialized (lazy) parameters",
)
"""Reasons that may change before the first optimizer step: the module is looked at again."""


def candidate_reason(module: Any, torch: Any, ours: frozenset[int] = frozenset()) -> str | None:
    """Why ``module`` (called at the outermost level) is not compiled; None: compile it.

    ``ours``: ids of modules the hook compiled itself (a submodule called on its own
    first, e.g. a dry run in ``__init__``): they do not make the module the script's.
    """
    if script_compiled(module, ours):
        return SCRIPT_COMPILED
    if isinstance(module, torch.nn.DataParallel):
        return (
            "wrapped in nn.DataParallel, whose replicas would all run the original module's "
            "compiled code: left eager. Use one process per GPU "
            "(distribution={'torch_distributed': {'enabled': True}}) to compile it"
        )
    sharded = fsdp.fsdp1_reason(module)
    if sharded is not None:
        return sharded
    if not module.training:
        return "eval mode"
    if not torch.is_grad_enabled():
        return "called with gradients disabled"
    params = list(module.parameters())
    if any(torch.nn.parameter.is_lazy(param) for param in params):
        return "uninitialized (lazy) parameters"
    if not any(param.requires_grad for param in params):
        return "no trainable parameters"
    return None


def script_compiled(module: Any, ours: frozenset[int] = frozenset()) -> bool:
    """Whether the script compiled ``module`` or one of its submodules itself.

    A submodule compiled by the script (regional compilation by trcomp.runtime or
    Accelerate) counts too: the model is the script's business then.
    """
    optimized = torch_compat.optimized_module_class()
    if optimized is not None and isinstance(module, optimized):
        return True
    for sub in module.modules():
        if id(sub) in ours:
            continue
        if torch_compat.compiled_call_impl(sub) is not None:
            return True
        if optimized is not None and isinstance(sub, optimized):
            return True
    return False


def wrapped_by_ddp(module: Any, torch: Any) -> Any:
    """The module DDP wraps, or None when ``module`` is not a DDP wrapper."""
    ddp = torch.nn.parallel.DistributedDataParallel
    return module.module if isinstance(module, ddp) else None
