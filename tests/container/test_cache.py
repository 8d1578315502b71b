"""Compile caches: live on local disk, restored from and persisted to the checkpoint dir."""

from __future__ import annotations

from pathlib import Path, PurePath

from trcomp_container.caching.lineage import is_transient, persist, restore


def test_temp_and_lock_files_are_transient() -> None:
    for path in (
        "inductor/locks/abc.lock",
        "triton/tmp.pid_12_34/kernel.cubin",
        "inductor/fxgraph/ab/.123.456.tmp",
        "xla/entry.tmp",
    ):
        assert is_transient(PurePath(path)), path
    for path in ("inductor/fxgraph/ab/abcdef", "triton/XYZ/kernel.cubin", "xla/123"):
        assert not is_transient(PurePath(path)), path


def test_round_trip_copies_only_lasting_new_files(tmp_path: Path) -> None:
    persistent, live = tmp_path / "checkpoints" / "trcomp-cache", tmp_path / "live"
    (persistent / "inductor" / "fxgraph").mkdir(parents=True)
    (persistent / "inductor" / "fxgraph" / "old").write_text("old graph")
    (persistent / "inductor" / "locks").mkdir()
    (persistent / "inductor" / "locks" / "x.lock").write_text("")

    assert restore(persistent, live) == 1
    assert (live / "inductor" / "fxgraph" / "old").read_text() == "old graph"
    assert not (live / "inductor" / "locks").exists()

    (live / "triton" / "K1").mkdir(parents=True)
    (live / "triton" / "K1" / "kernel.cubin").write_text("kernel")
    (live / "triton" / "tmp.pid_1_2").mkdir()
    (live / "triton" / "tmp.pid_1_2" / "half.cubin").write_text("half")
    assert persist(live, persistent) == 1  # the new kernel; "old" is already there
    assert (persistent / "triton" / "K1" / "kernel.cubin").read_text() == "kernel"
    assert not (persistent / "triton" / "tmp.pid_1_2").exists()
    assert persist(live, persistent) == 0
    assert restore(tmp_path / "missing", tmp_path / "live2") == 0


def test_restore_leaves_the_jax_cache_where_jax_writes_it(tmp_path: Path) -> None:
    persisted = tmp_path / "persisted"
    (persisted / "jax").mkdir(parents=True)
    (persisted / "jax" / "program-cache").write_bytes(b"x")
    (persisted / "inductor").mkdir()
    (persisted / "inductor" / "graph").write_bytes(b"y")
    live = tmp_path / "live"
    assert restore(persisted, live) == 1
    assert (live / "inductor" / "graph").is_file() and not (live / "jax").exists()
