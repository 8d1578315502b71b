"""One cold compile per host, not one per rank: the host's first rank compiles each graph first.

Under torchrun every rank of a host traces and compiles the same graphs at the
same moment, each cold, each competing for the same CPU cores, into one
shared inductor cache (``TORCHINDUCTOR_CACHE_DIR`` is the job's, the same for
every rank of a host). Here the compiles of a host's ranks take turns: at the
start of its n-th compile (dynamo's start callback: a frame, or a backward
compiled lazily) a rank other than the host's first (``LOCAL_RANK`` 0) waits
until that rank finished its own n-th compile, then compiles, and finds
inductor's and AOTAutograd's cache entries the first rank wrote (the record's
``compile.cache`` counts those hits).

No harm: nothing waits without a bound. A rank waits for the first rank to
*begin* its n-th compile at most :data:`GRACE_S` (the ranks run in step, so it
begins at about the same time; a rank whose code took another path compiles at
once), once: after a compile the first rank did not begin in time, a rank waits
only for compiles the first rank has already begun. All its waits together
last at most :data:`MAX_WAIT_S`; then it compiles for itself. So nothing, not
even a client of the job's store that writes the keys itself, holds a rank
longer than ``GRACE_S + MAX_WAIT_S`` over the whole job, and every second of it
is in the record (``waited_s``).
A rank that cannot load what the first rank wrote (another cache, another
graph) compiles for itself, as it would have. The exchange goes through the
process group's c10d store, never a collective on the training group.

Standard library only at import; torch.distributed is read only once the script
set up a process group.
"""

from __future__ import annotations

import sys
import time
from dataclasses import dataclass
from datetime import timedelta
from typing import Any

from trcomp.contract.env import COMPILE_TURNS_ENV
from trcomp_container.inprocess import torch_compat

__all__ = ["GRACE_S", "MAX_WAIT_S", "OFF_ENV", "Turns"]

OFF_ENV = COMPILE_TURNS_ENV
"""Set to ``0``: the ranks of a host compile at once, each for itself (as without trcomp)."""
GRACE_S = 30.0
"""How long a rank waits for the host's first rank to begin the same compile."""
MAX_WAIT_S = 900.0
"""How long a rank waits for the host's first rank, all its compiles together."""


def _seconds(seconds: float) -> timedelta:
    return timedelta(seconds=max(seconds, 0.001))


@dataclass
class Turns:
    """This rank's turns at compiling, and what waiting for them cost.

    ``local_rank`` and ``local_world_size``: torchrun's ``LOCAL_RANK`` and
    ``LOCAL_WORLD_SIZE``; ``node``: which host (torchrun's ``GROUP_RANK``).
    """

    local_rank: int = 0
    local_world_size: int = 1
    node: int = 0
    grace_s: float = GRACE_S
    max_wait_s: float = MAX_WAIT_S
    compiles: int = 0
    """Compiles begun in this process (the n of the keys)."""
    waited: int = 0
    """Compiles that began after the first rank's same compile ended."""
    waited_s: float = 0.0
    """Every second spent waiting, the grace included."""
    alone: int = 0
    """Compiles the first rank had not begun (within the grace, the first time): compiled
    at once."""
    timed_out: int = 0
    """Compiles waited for until the wait budget (:data:`MAX_WAIT_S`) was spent (one at
    most: later compiles wait no more)."""
    missed: bool = False
    """Whether the first rank once did not begin a compile within the grace: from then on
    a compile waits only when the first rank has begun it already."""
    _store: Any = None
    _off: bool = False

    @classmethod
    def from_env(cls, env: dict[str, str]) -> Turns:
        """From torchrun's variables; ``TRCOMP_COMPILE_TURNS=0``: every rank compiles at once."""
        return cls(
            local_rank=int(env.get("LOCAL_RANK", "0") or 0),
            local_world_size=int(env.get("LOCAL_WORLD_SIZE", "1") or 1),
            node=int(env.get("GROUP_RANK", "0") or 0),
            _off=env.get(OFF_ENV, "1").strip() == "0",
        )

    @property
    def first(self) -> bool:
        """Whether this is the host's first rank (it compiles without waiting)."""
        return self.local_rank == 0

    def _key(self, index: int, what: str) -> str:
        return f"trcomp/compile-turns/{self.node}/{index}/{what}"

    def _ready(self) -> bool:
        if self._off or self.local_world_size < 2:
            return False
        if self._store is None:
            dist = sys.modules.get("torch.distributed")
            if dist is None or not (dist.is_available() and dist.is_initialized()):
                return False  # no process group (yet): this compile is not taken in turn
            self._store = torch_compat.c10d_store()
            if self._store is None:
                self._off = True
                return False
        return True

    def begin(self) -> None:
        """A compile begins: the first rank says so; another waits its turn (bounded)."""
        index = self.compiles
        self.compiles += 1
        if not self._ready():
            return
        if self.first:
            self._store.set(self._key(index, "begun"), "1")
            return
        left = self.max_wait_s - self.waited_s
        if left <= 0 or self.timed_out:  # the budget is spent
            self.alone += 1
            return
        started = time.perf_counter()
        begun = self._key(index, "begun")
        try:
            if self.missed:
                if not self._store.check([begun]):
                    self.alone += 1
                    return
            else:
                try:
                    self._store.wait([begun], _seconds(min(self.grace_s, left)))
                except RuntimeError:  # c10d's timeout: the first rank took another path
                    self.alone += 1
                    self.missed = True
                    return
            try:
                spent = time.perf_counter() - started
                self._store.wait([self._key(index, "ended")], _seconds(left - spent))
                self.waited += 1
            except RuntimeError:
                self.timed_out += 1
        finally:
            self.waited_s += time.perf_counter() - started

    def end(self) -> None:
        """A compile ended: the first rank says so (the others may compile theirs now)."""
        if self.first and self._ready():
            self._store.set(self._key(self.compiles - 1, "ended"), "1")

    def as_dict(self) -> dict[str, Any] | None:
        """The record's ``compile.turns``; None when this host runs one rank."""
        if self.local_world_size < 2:
            return None
        role = "first" if self.first else "after the host's first rank"
        return {
            "role": f"off ({OFF_ENV}=0)" if self._off else role,
            "compiles": self.compiles,
            "waited": self.waited,
            "waited_s": round(self.waited_s, 4),
            "alone": self.alone,
            "timed_out": self.timed_out,
            "wait_budget_s": self.max_wait_s,
        }
