"""Patches of other libraries, each an ``install()`` that returns its undo.

Risky by nature: each one changes a library's behaviour inside the user's
process. They live here, apart from the rest, so they are easy to find and to
review; the session records each undo in its ledger. The torch names they touch
come from :mod:`trcomp_container.inprocess.torch_compat`.
"""

from __future__ import annotations

__all__: list[str] = []
