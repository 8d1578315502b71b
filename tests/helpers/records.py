"""The hook's per-rank records of a finished job: the counters tests assert instead of clocks.

Every training process writes ``output/data/compiler/ranks/rank<N>-pid<P>.json``
at exit (docs/summary.md). A test that wants to know whether the compiler ran
counts its compilations there; it never asks whether a time was above zero,
which a fast machine or a coarse clock can get wrong either way. Standard
library only: the SDK v3 tests import it too.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

__all__ = ["RANKS", "compilations", "read_records", "records_in_members"]

RANKS = "data/compiler/ranks"  # under the job's output/ (and in output.tar.gz)
_RECORD = re.compile(r"(?:^|/)rank\d+-pid\d+\.json$")


def compilations(record: Mapping[str, Any]) -> int:
    """The compilations one rank counted: the events its ``compile_time_s`` adds up.

    The jax engine: programs built; torch-xla: its ``CompileTime`` metric's count;
    otherwise dynamo's compile callbacks (``compile.events``), 0 for an eager run.
    """
    if record.get("jax"):
        return int(record["jax"].get("programs_compiled", 0))
    if record.get("xla"):
        return int(record["xla"].get("compiles", 0))
    return int((record.get("compile") or {}).get("events", 0))


def read_records(output_dir: Path) -> list[dict[str, Any]]:
    """The records under a job's ``output/`` directory, rank order."""
    return [
        json.loads(path.read_text())
        for path in sorted((Path(output_dir) / RANKS).glob("rank*-pid*.json"))
    ]


def records_in_members(members: Mapping[str, bytes | str]) -> list[dict[str, Any]]:
    """The records among an ``output.tar.gz``'s members (name -> content)."""
    names: Iterable[str] = sorted(name for name in members if _RECORD.search(name))
    return [json.loads(members[name]) for name in names]
