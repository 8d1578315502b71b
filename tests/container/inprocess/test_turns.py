"""The ranks of a host take turns at compiling, and no rank waits without a bound.

Two :class:`Turns` (the host's first rank and another) share a real c10d
``HashStore`` in this process, each on its own thread as each rank is its own
process. Two ranks under torchrun, compiling for real, are the corpus's
two-rank scripts (test_corpus.py checks that rank 1 found every graph in the cache).
"""

from __future__ import annotations

import threading

import pytest

from trcomp_container.inprocess.turns import Turns

dist = pytest.importorskip("torch.distributed")


def pair(**bounds) -> tuple[Turns, Turns]:
    store = dist.HashStore()
    first, other = (
        Turns(local_rank=rank, local_world_size=2, _store=store, **bounds) for rank in (0, 1)
    )
    return first, other


def counted_waits(turns: Turns) -> list[float]:
    """The timeouts (seconds) of each wait ``turns`` asks of its store: counted, not timed."""
    asked: list[float] = []
    store = turns._store

    class Counting:
        def __getattr__(self, name):
            return getattr(store, name)

        def wait(self, keys, timeout):
            asked.append(timeout.total_seconds())
            return store.wait(keys, timeout)

    turns._store = Counting()
    return asked


def test_a_rank_compiles_after_the_first_rank_finished_the_same_compile():
    first, other = pair()
    order: list[str] = []
    first.begin()
    waiting = threading.Thread(target=lambda: (other.begin(), order.append("other compiles")))
    waiting.start()
    waiting.join(0.5)
    assert waiting.is_alive()  # rank 0 is still compiling: rank 1 waits
    order.append("first ends")
    first.end()
    waiting.join()
    assert order == ["first ends", "other compiles"]
    assert (other.waited, other.alone, other.timed_out) == (1, 0, 0)
    assert other.as_dict()["role"] == "after the host's first rank"
    assert first.as_dict() == {
        "role": "first",
        "compiles": 1,
        "waited": 0,
        "waited_s": 0.0,
        "alone": 0,
        "timed_out": 0,
        "wait_budget_s": 900.0,
    }


def test_a_backward_one_rank_loaded_from_the_cache_leaves_the_next_compiles_paired():
    """Rank 0 compiled frame 0/0's forward, then its backward lazily; rank 1 loaded both
    from the cache rank 0 wrote, so it never compiles that backward. Its compile of frame
    0/1 waits for rank 0's compile of 0/1, not for rank 0's second compile (0/0's
    backward, long ended): paired by count, rank 1 compiled 0/1's backward cold."""
    first, other = pair()
    for _ in ("forward", "backward"):
        first.begin("0/0")
        first.end()
    other.begin("0/0")  # ended already: no wait, and no backward compile of 0/0 after it
    first.begin("0/1")
    order: list[str] = []
    waiting = threading.Thread(target=lambda: (other.begin("0/1"), order.append("other")))
    waiting.start()
    waiting.join(0.5)
    assert waiting.is_alive()  # rank 0 is still compiling 0/1
    order.append("first ends 0/1")
    first.end()
    waiting.join()
    assert order == ["first ends 0/1", "other"]
    assert (other.compiles, other.waited, other.alone) == (2, 2, 0)


def test_a_compile_the_first_rank_never_begins_is_compiled_at_once_after_the_grace():
    first, other = pair(grace_s=0.2)
    other.begin()  # rank 0 took another path: no compile 0 on its side
    assert (other.waited, other.alone, other.timed_out) == (0, 1, 0)
    # The next compile pairs with rank 0's next one as before.
    first.begin()
    first.end()
    first.begin()
    first.end()
    other.begin()
    assert other.waited == 1


def test_a_first_rank_that_never_ends_its_compile_is_waited_for_at_most_the_bound():
    first, other = pair(max_wait_s=0.2)
    first.begin()  # begun, never ended (its process died in the compile)
    other.begin()
    assert (other.waited, other.alone, other.timed_out) == (0, 0, 1)


def test_compiles_the_first_rank_never_makes_cost_one_grace_and_every_wait_is_recorded():
    """Each compile the first rank did not make cost the whole grace again, and the record
    said ``waited_s`` 0.2 for 60 s lost (7205ae0)."""
    _, other = pair(grace_s=0.3)
    waits = counted_waits(other)
    for _ in range(3):
        other.begin()
    assert (other.alone, other.missed) == (3, True)
    assert len(waits) == 1  # one grace, not three
    assert other.waited_s > 0  # and it is in the record


def test_a_store_client_holds_a_rank_at_most_the_wait_budget_over_the_whole_job():
    """Whoever writes the keys (any client of the job's c10d store) begins compiles it never
    ends, or ends each just before the bound: all waits together stay within the budget."""
    _, other = pair(max_wait_s=0.4)
    for index in range(4):
        other._store.set(other._key(f"#{index}", "begun"), "1")
    waits = counted_waits(other)
    for _ in range(4):
        other.begin()
    # The first compile's two waits (begun at once, then ended until the budget), each
    # asking at most the budget; the later compiles ask the store nothing.
    assert len(waits) == 2 and max(waits) <= 0.4, waits
    assert other.timed_out == 1 and other.alone == 3


def test_one_rank_per_host_or_no_process_group_takes_no_turns():
    alone = Turns.from_env({"LOCAL_RANK": "0", "LOCAL_WORLD_SIZE": "1"})
    alone.begin()
    assert alone.as_dict() is None
    # Two ranks per host, but no process group yet (a compile before init_process_group).
    early = Turns.from_env({"LOCAL_RANK": "1", "LOCAL_WORLD_SIZE": "2", "GROUP_RANK": "3"})
    early.begin()
    assert (early.node, early.compiles, early.waited, early.alone) == (3, 1, 0, 0)


def test_turns_can_be_turned_off():
    off = Turns.from_env({"LOCAL_RANK": "1", "LOCAL_WORLD_SIZE": "2", "TRCOMP_COMPILE_TURNS": "0"})
    off._store = dist.HashStore()
    off.begin()  # would wait 30 s for a first rank that never comes
    assert (off.waited, off.alone) == (0, 0)
    assert off.as_dict()["role"] == "off (TRCOMP_COMPILE_TURNS=0)"
