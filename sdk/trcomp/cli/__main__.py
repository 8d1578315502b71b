"""``python -m trcomp.cli``: the same as the ``trcomp`` command."""

from __future__ import annotations

import sys

from trcomp.cli import main

sys.exit(main())
