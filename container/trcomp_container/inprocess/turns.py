"""One cold compile per host, not one per rank: the host's first rank compiles each graph first.

Under torchrun every rank of a host traces and compiles the same graphs at the
same moment, each cold, each competing for the same CPU cores, into one
shared inductor cache (``TORCHINDUCTOR_CACHE_DIR`` is the job's, the same for
every rank of a host). Here the compiles of a host's ranks take turns: at the
start of a compile (dynamo's start callback: a frame, or a backward compiled
lazily) a rank other than the host's first (``LOCAL_RANK`` 0) waits until that
rank finished the same compile, then compiles, and finds inductor's and
AOTAutograd's cache entries the first rank wrote (the record's
``compile.cache`` counts those hits).

A compile is known by dynamo's compile id (``0/1``: the frame, and which of its
compiles) and by how many compiles of that id began before it in this process
(a frame's forward, then its backward compiled lazily). Not by a count of all
compiles: a rank that loads a frame's forward and backward from the cache the
first rank wrote never compiles that backward, and every later compile of its
would pair with the wrong one of the first rank's (it did: rank 1 of FSDP2's
corpus script compiled a backward cold). A callback without an id pairs by the
count.

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
from dataclasses import dataclass, field
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
    _seen: dict[str, int] = field(default_factory=dict)
    """How many compiles of each compile id began in this process."""
    _current: str = ""
    """The name of the compile begun last (what :meth:`end` ends)."""

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

    def _key(self, name: str, what: str) -> str:
        return f"trcomp/compile-turns/{self.node}/{name}/{what}"

    def _name(self, index: int, compile_id: str | None) -> str:
        """This compile's name in the store: its compile id and which of that id's
        compiles it is (``0/1#0``, then ``0/1#1``); ``#<index>`` without an id."""
        if not compile_id:
            return f"#{index}"
        seen = self._seen.get(compile_id, 0)
        self._seen[compile_id] = seen + 1
        return f"{compile_id}#{seen}"

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

    def begin(self, compile_id: str | None = None) -> None:
        """A compile begins (``compile_id``: dynamo's, as ``0/1``): the first rank says
        so; another waits until the first rank ended the same compile (bounded)."""
        index = self.compiles
        self.compiles += 1
        self._current = name = self._name(index, compile_id)
        if not self._ready():
            return
        if self.first:
            self._store.set(self._key(name, "begun"), "1")
            return
        left = self.max_wait_s - self.waited_s
        if left <= 0 or self.timed_out:  # the budget is spent
            self.alone += 1
            return
        started = time.perf_counter()
        begun = self._key(name, "begun")
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
                self._store.wait([self._key(name, "ended")], _seconds(left - spent))
                self.waited += 1
            except RuntimeError:
                self.timed_out += 1
        finally:
            self.waited_s += time.perf_counter() - started

    def end(self) -> None:
        """A compile ended: the first rank says so (the others may compile theirs now)."""
        if self.first and self._ready():
            self._store.set(self._key(self._current, "ended"), "1")

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
