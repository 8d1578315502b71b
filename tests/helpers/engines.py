"""Skip marks for tests that need an XLA engine installed.

torch-xla's last release is 2.9.0 and torchax fails to import with torch >= 2.13, so
an environment on a newer torch (``make test-214``) has neither: the tests that run
them skip there, with the reason, and keep running on torch 2.9 (``make test``).
Found by ``importlib.util.find_spec``: nothing is imported into the test process.
"""

from __future__ import annotations

from importlib.util import find_spec

import pytest

__all__ = ["needs_torch_xla"]

needs_torch_xla = pytest.mark.skipif(
    find_spec("torch_xla") is None,
    reason="needs torch-xla, which has no release after 2.9.0 (a newer torch has none)",
)
