"""Stand-in command-line tools: shell scripts on a PATH of their own."""

from __future__ import annotations

from pathlib import Path

__all__ = ["path_of_scripts"]


def path_of_scripts(tmp_path: Path, **scripts: str) -> str:
    """A PATH holding only these shell scripts (name -> body), e.g. a stand-in ``docker``."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    for name, body in scripts.items():
        (bin_dir / name).write_text(f"#!/bin/sh\n{body}\n")
        (bin_dir / name).chmod(0o755)
    return str(bin_dir)
