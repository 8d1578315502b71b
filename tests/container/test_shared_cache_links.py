"""A link in the live compile cache: left out of the job's entry and named, never
spoiling it.

Real files with real symbolic and hard links, a real ``file://`` store and the
team's key; the reader is a second job's :func:`open_shared_cache`.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from tests.container.test_shared_cache_reads import _open
from trcomp_container.caching import entry
from trcomp_container.caching.entry import EntryError

KEY = "team-a-key-0123456789abcdef"


def _write(path: Path, body: bytes) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(body)
    return path


def test_links_are_left_out_and_named_and_the_signed_entry_stays_readable(tmp_path):
    uri = f"file://{tmp_path / 'shared'}"
    live = tmp_path / "writer" / "live"
    writer = _open(uri, live, KEY)
    _write(live / "inductor/fxgraph/ab/g1", b"graph")
    _write(live / "triton/K/k.so", b"kernel")
    outside = _write(tmp_path / "elsewhere" / "notes", b"not the cache's")
    (live / "inductor/fxgraph/ab/to-outside").symlink_to(outside)
    (live / "inductor/fxgraph/ab/to-inside").symlink_to(live / "triton/K/k.so")
    (live / "triton/dir-link").symlink_to(outside.parent, target_is_directory=True)
    os.link(outside, live / "triton/K/hard")  # one more name of a file outside the cache
    _write(live / "aot/pair-a", b"twice")
    os.link(live / "aot/pair-a", live / "aot/pair-b")

    facts = writer.finish(live, succeeded=True)
    links = [
        "aot/pair-a", "aot/pair-b", "inductor/fxgraph/ab/to-inside",
        "inductor/fxgraph/ab/to-outside", "triton/K/hard", "triton/dir-link",
    ]  # fmt: skip
    assert facts["files_written"] == 2, facts
    assert facts["links_left_out"] == links and facts["links_left_out_count"] == 6
    assert any("6 link(s)" in w and "triton/K/hard and 1 more" in w for w in facts["warnings"])

    reader_live = tmp_path / "reader" / "live"
    reader = _open(uri, reader_live, KEY)
    assert (reader.facts["entries_read"], reader.facts["entries_skipped"]) == (1, 0), reader.facts
    assert reader.facts["files_read"] == 2
    assert (reader_live / "inductor/fxgraph/ab/g1").read_bytes() == b"graph"
    assert (reader_live / "triton/K/k.so").read_bytes() == b"kernel"
    found = sorted(p.relative_to(reader_live).as_posix() for p in reader_live.rglob("*"))
    assert not [name for name in found if any(name.startswith(link) for link in links)]


def test_a_file_swapped_for_a_link_after_it_was_listed_writes_nothing(tmp_path):
    live = tmp_path / "live"
    _write(live / "inductor/g", b"graph")
    _write(tmp_path / "elsewhere", b"secret")
    ((_, path, listed),) = entry._walk(live, {}, None)
    path.unlink()
    path.symlink_to(tmp_path / "elsewhere")
    with pytest.raises(EntryError, match="could not be opened as a file"):
        entry._add_file(None, "inductor/g", path, listed)  # type: ignore[arg-type]
    path.unlink()
    _write(path, b"graph, written again")  # another inode, another size
    with pytest.raises(EntryError, match="changed while the entry was written"):
        entry._add_file(None, "inductor/g", path, listed)  # type: ignore[arg-type]
