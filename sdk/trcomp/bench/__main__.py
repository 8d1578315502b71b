"""``python -m trcomp.bench``: the same command as ``trcomp bench``."""

from __future__ import annotations

from trcomp.bench.cli import main

raise SystemExit(main())
