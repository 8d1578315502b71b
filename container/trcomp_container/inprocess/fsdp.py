"""FSDP under the zero-code path: a model sharded with FSDP2 is compiled block by block.

FSDP2 (``torch.distributed.fsdp.fully_shard``) puts its all-gather and
reduce-scatter in forward hooks of each module it manages. Compiled whole, the
model's graph breaks at every one of those hooks. So when the outermost trained
module is managed by FSDP2 and holds other modules FSDP2 manages (the blocks a
script sharded one by one, then the root), the hook compiles each block's
``forward`` instead of the root: FSDP's hooks run eager around the compiled
forward, whose parameters are the gathered ones at that point, and the root's
own layers (embeddings, head) stay with FSDP, eager. A block that holds another
managed block is left to its inner blocks (only blocks holding none are compiled).

All blocks of one class share one traced function (:func:`shared_forward`), so
dynamo traces the block once and its later copies reuse that graph.

FSDP1 (``FullyShardedDataParallel``, which HF Trainer and Accelerate use for
``fsdp_version=1``) is left eager with a named reason (:data:`FSDP1_REASON`).

Standard library only at import; torch is passed in, and FSDP is read only
when the script imported it.
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from typing import Any

__all__ = ["FSDP1_REASON", "blocks", "fsdp1_reason", "shared_forward"]

FSDP1_REASON = (
    "sharded with FullyShardedDataParallel (FSDP1): left eager. torch.compile needs "
    "use_orig_params=True with FSDP1 and breaks its graph at every wrapped unit; shard with "
    "torch.distributed.fsdp.fully_shard (FSDP2) to have each block compiled"
)


def _fsdp2_class() -> Any:
    """``FSDPModule`` (every module FSDP2 manages is one), or None before FSDP is imported."""
    loaded = sys.modules.get("torch.distributed.fsdp")
    found = getattr(loaded, "FSDPModule", None)
    return found if isinstance(found, type) else None


def blocks(module: Any) -> list[tuple[str, Any]]:
    """The FSDP2 blocks of ``module`` to compile, as (path, block); empty when ``module`` is
    not managed by FSDP2 or holds no other managed module."""
    managed = _fsdp2_class()
    if managed is None or not isinstance(module, managed):
        return []
    found = [
        (path, sub)
        for path, sub in module.named_modules()
        if sub is not module and isinstance(sub, managed)
    ]
    return [
        (path, sub)
        for path, sub in found
        if not any(inner is not sub and isinstance(inner, managed) for inner in sub.modules())
    ]


def fsdp1_reason(module: Any) -> str | None:
    """:data:`FSDP1_REASON` when ``module`` is, or holds, an FSDP1 unit; None otherwise."""
    loaded = sys.modules.get("torch.distributed.fsdp.fully_sharded_data_parallel")
    fsdp1 = getattr(loaded, "FullyShardedDataParallel", None)
    if not isinstance(fsdp1, type):
        return None
    return FSDP1_REASON if any(isinstance(sub, fsdp1) for sub in module.modules()) else None


def shared_forward(
    torch: Any,
    cls: Any,
    code_name: str,
    on_eager: Callable[[Any], None],
    compile_kwargs: dict[str, Any],
) -> Callable[..., Any]:
    """``torch.compile`` of ``cls.forward`` taking the block first, named ``code_name``.

    One per block class: dynamo keeps its graphs per code object, and with the block
    an argument (not a closure) every copy of the class reuses the graph traced for the
    first. ``on_eager(block)`` is called when dynamo runs the call as plain Python.
    """
    forward = cls.forward
    is_compiling = torch.compiler.is_compiling

    def traced(block: Any, *args: Any, **kwargs: Any) -> Any:
        if not is_compiling():  # folded to False in compiled code: runs only eager
            on_eager(block)
        return forward(block, *args, **kwargs)

    traced.__code__ = traced.__code__.replace(co_name=code_name)
    return torch.compile(traced, **compile_kwargs)  # type: ignore[no-any-return]
