"""The trcomp version, kept apart so importing it costs nothing."""

from __future__ import annotations

__version__ = "0.1.0"
