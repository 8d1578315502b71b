"""What trcomp does inside the user's training process (the start-up hook's package).

``hook/sitecustomize.py``, first on the job's ``PYTHONPATH``, calls :func:`start`
in every process of the job (torchrun workers too). It does nothing unless
``TRCOMP_METRICS_DIR`` is set, imports nothing heavy, and hooks in only when the
script itself imports torch. One :class:`.session.Session` per process owns
everything done here (docs/architecture.md has the map):

- :mod:`.settings`: the one reader of the environment;
- :mod:`.session`: state, the ledger of changes (:mod:`.ledger`), the event
  dispatch and the no-harm boundary;
- :mod:`.torch_compat`: every torch private name, pinned by one test file;
- :mod:`.patches`: each library patch as an ``install()`` returning its undo;
- :mod:`.switch`, :mod:`.autocompile`, :mod:`.policy`, :mod:`.compiled`,
  :mod:`.eager`: what the zero-code path compiles and when it runs eager;
- :mod:`.speedup`: eager against compiled (window, rule, key, store, exchange);
- :mod:`.aot`: warm starts from ahead-of-time artifacts (torch 2.14);
- :mod:`.record`, :mod:`.recording`, :mod:`.reports`: the per-rank record.

Standard library only at import.
"""

from __future__ import annotations

__all__ = ["start"]


def start() -> None:
    """Start this process's session when the job asked for one (``TRCOMP_METRICS_DIR``)."""
    from trcomp_container.inprocess.settings import Settings

    settings = Settings.from_env()
    if not settings.enabled:
        return
    from trcomp_container.inprocess.session import Session

    Session(settings).start()
