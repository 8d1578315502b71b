"""Which interpreter a benchmark command runs on for a torch version.

The same rule as process mode (:func:`trcomp.local.interpreter.job_python`):
this interpreter when its torch is that version, else the one named by
``TRCOMP_PROCESS_PYTHON_<MAJOR>_<MINOR>`` (checked), else an error with the
command that makes one. ``make gpu-check TORCH_VERSION=2.14`` and the GPU
throughput script's ``--torch-version`` go through :func:`run_on_torch`, which
starts the command again on that interpreter, so the command and every child
it starts (``sys.executable``) run on the torch asked for.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Mapping, Sequence

__all__ = ["python_for", "run_on_torch"]


def python_for(version: str, environ: Mapping[str, str] | None = None) -> str:
    """The interpreter a process-mode job with ``framework_version=version`` runs on."""
    from trcomp.local.interpreter import job_python

    return job_python(version, os.environ if environ is None else environ)


def run_on_torch(version: str | None, module: str, argv: Sequence[str]) -> None:
    """Start ``python -m module argv`` again on ``version``'s interpreter, unless this is it.

    ``version`` None: nothing to do. Returns only when this interpreter is the one;
    raises :class:`~trcomp.contract.errors.LocalModeError` when none has that torch.
    """
    if not version:
        return
    python = python_for(version)
    if python == sys.executable:  # job_python's answer when this torch is the one
        return
    sys.stdout.flush()
    sys.stderr.flush()
    os.execv(python, [python, "-m", module, *argv])
