"""The tests' warm compile cache keeps only the precompiled headers that sessions use.

Each run from a clone in another folder wrote two new 123 MB headers beside the old
ones (tests/helpers/compile_cache.py); :func:`prune_headers` removes those no session
has read or written for :data:`HEADER_KEEP_S`.
"""

from __future__ import annotations

import os
import time
from pathlib import Path

from tests.helpers.compile_cache import HEADER_KEEP_S, prune_headers


def header(cache: Path, name: str, age_s: float, read_age_s: float | None = None) -> Path:
    """A precompiled header and its ``.h``, last written ``age_s`` seconds ago and last
    read ``read_age_s`` ago (as old as written without it)."""
    folder = cache / "precompiled_headers"
    folder.mkdir(parents=True, exist_ok=True)
    now = time.time()
    built = folder / f"{name}.h.gch"
    for path in (folder / f"{name}.h", built):
        path.write_bytes(b"#include <torch/csrc/inductor/cpp_prefix.h>\n")
        read = now - (age_s if read_age_s is None else read_age_s)
        os.utime(path, (read, now - age_s))
    return built


def test_headers_unused_for_the_keep_time_go_and_used_ones_stay(tmp_path: Path) -> None:
    old = header(tmp_path, "cold", HEADER_KEEP_S + 3600)
    written = header(tmp_path, "written", 60)
    read = header(tmp_path, "read", HEADER_KEEP_S + 3600, read_age_s=60)
    other = tmp_path / "fxgraph" / "entry"
    other.parent.mkdir()
    other.write_bytes(b"x")
    os.utime(other, (0, 0))  # anything but a precompiled header is inductor's to keep

    removed = prune_headers(tmp_path)

    assert sorted(p.name for p in removed) == ["cold.h", "cold.h.gch"]
    assert not old.exists() and not old.with_suffix("").exists()
    assert written.exists() and read.exists() and read.with_suffix("").exists()
    assert other.exists()


def test_a_cache_without_headers_is_left_as_it_is(tmp_path: Path) -> None:
    assert prune_headers(tmp_path) == []
    assert list(tmp_path.iterdir()) == []
