"""Decisions of earlier jobs of the lineage, one JSON file in the job's compile cache."""

from __future__ import annotations

import json
import os
import tempfile
from pathlib import Path
from typing import Any

from trcomp_container.inprocess.speedup.rule import Decision

__all__ = ["STORE_FILE", "DecisionStore"]

STORE_FILE = Path("trcomp") / "speedup.json"
"""The store's file inside the compile cache (``TRCOMP_CACHE_DIR``)."""


class DecisionStore:
    """Decisions keyed by the decision key (:mod:`.key`)."""

    def __init__(self, path: Path) -> None:
        self.path = path

    def _read(self) -> dict[str, Any]:
        try:
            body = json.loads(self.path.read_text())
        except (OSError, ValueError):
            return {}
        return body if isinstance(body, dict) else {}

    def load(self, key: str) -> tuple[Decision, int] | None:
        """The stored decision for ``key`` and how many jobs used it; None when absent."""
        entry = self._read().get(key)
        if not isinstance(entry, dict):
            return None
        try:
            # "noisy" came later: a decision stored before it was never noisy.
            fields = {
                name: entry[name] for name in Decision.__dataclass_fields__ if name != "noisy"
            }
            fields["source"] = "stored"
            return Decision(**fields), int(entry.get("uses", 0))
        except (KeyError, TypeError, ValueError):
            return None

    def save(self, key: str, decision: Decision, *, uses: int = 0) -> None:
        """Add or replace ``key``'s decision, atomically (write a temp file, rename)."""
        body = self._read()
        body[key] = {**decision.as_dict(), "source": "measured", "uses": uses}
        self.path.parent.mkdir(parents=True, exist_ok=True)
        handle, temp = tempfile.mkstemp(dir=self.path.parent, prefix=".speedup.", suffix=".tmp")
        with os.fdopen(handle, "w") as out:
            json.dump(body, out, indent=1, sort_keys=True)
        os.replace(temp, self.path)
