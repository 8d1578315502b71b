"""Every rank's figures, through the c10d store (not the training group's collectives).

DDP may have its gradient all-reduce in flight on the training group; a
collective of ours there could pair with one of its own. The store is a
separate channel every rank already has.
"""

from __future__ import annotations

import json
from datetime import timedelta
from typing import Any

from trcomp_container.inprocess import torch_compat

__all__ = ["EXCHANGE_TIMEOUT_S", "exchange"]

EXCHANGE_TIMEOUT_S = 60.0


def exchange(local: Any, *, topic: str = "speedup") -> list[Any]:
    """``local`` (JSON-able) from every rank, rank order; ``[None]`` when one never came."""
    import torch.distributed as dist

    if not (dist.is_available() and dist.is_initialized()) or dist.get_world_size() < 2:
        return [local]
    store = torch_compat.c10d_store()
    if store is None:
        return [None]
    world = dist.get_world_size()
    keys = [f"trcomp/{topic}/{rank}" for rank in range(world)]
    store.set(keys[dist.get_rank()], json.dumps(local))
    try:
        store.wait(keys, timedelta(seconds=EXCHANGE_TIMEOUT_S))
    except RuntimeError:  # c10d's timeout (DistStoreError is a RuntimeError)
        return [None]
    return [json.loads(store.get(key)) for key in keys]
