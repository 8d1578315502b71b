"""``python -m trcomp_bench``: the same command as ``trcomp bench``."""

from __future__ import annotations

from trcomp_bench.cli import main

raise SystemExit(main())
