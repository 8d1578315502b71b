"""Which Python a process-mode job runs on: one whose torch is the version the job asks for.

A job in trcomp's image runs on that image's torch; in process mode the same job
runs on a local torch, so the local torch must be that version, or the job would
test something the real job never runs. The rule, in order:

1. this interpreter, when its installed torch is the job's version (read from the
   package metadata: importing torch takes seconds);
2. the interpreter named by ``TRCOMP_PROCESS_PYTHON_<MAJOR>_<MINOR>`` (for example
   ``TRCOMP_PROCESS_PYTHON_2_14``), once checked: it exists, its torch is that
   version, and it has the training toolkit and trcomp's container package;
3. otherwise :class:`~trcomp.contract.errors.LocalModeError`, before anything is
   created, with the command that makes such an environment.

A job never runs on another torch than the one it asks for.
"""

from __future__ import annotations

import importlib.metadata
import json
import os
import subprocess
import sys
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from trcomp.contract.env import PROCESS_PYTHON_PREFIX
from trcomp.contract.errors import LocalModeError
from trcomp.image.uris import default_image, image_for

__all__ = ["ENV_PREFIX", "env_var_for", "job_python", "wanted_torch"]

ENV_PREFIX = PROCESS_PYTHON_PREFIX
"""``TRCOMP_PROCESS_PYTHON_2_14=/path/to/python`` names the interpreter for torch 2.14 jobs."""

# What a job imports in the interpreter it runs on (checked by name, not imported).
_JOB_MODULES = ("sagemaker_training", "trcomp_container")
_PROBE = (
    "import importlib.metadata as m, importlib.util as u, json, sys\n"
    "try:\n    torch = m.version('torch')\nexcept m.PackageNotFoundError:\n    torch = None\n"
    "print(json.dumps({'torch': torch, 'missing': [n for n in sys.argv[1:] "
    "if u.find_spec(n) is None]}))\n"
)


def wanted_torch(framework_version: str | None) -> str:
    """The torch release a job runs on: the image's full version for a version trcomp
    builds (``2.14`` is 2.14.1), else the version as given (a job on the user's image)."""
    image = image_for(framework_version)
    if image is not None:
        return image.torch
    assert framework_version is not None  # image_for(None) is the default image
    return framework_version


def _release(installed: str) -> str:
    return installed.split("+", 1)[0]  # 2.9.0+cu128 -> 2.9.0


def _matches(wanted: str, installed: str | None) -> bool:
    if installed is None:
        return False
    release = _release(installed)
    return wanted in (release, release.rsplit(".", 1)[0])


def env_var_for(wanted: str) -> str:
    """``TRCOMP_PROCESS_PYTHON_2_14`` for torch 2.14.1 (or 2.14)."""
    major, minor = ([*wanted.split("."), "0"])[:2]
    return f"{ENV_PREFIX}{major}_{minor}"


def _installed_here() -> str | None:
    try:
        return importlib.metadata.version("torch")
    except importlib.metadata.PackageNotFoundError:
        return None


def _how_to_get(wanted: str, var: str) -> str:
    """The commands that make an environment with torch ``wanted`` for process mode."""
    image = image_for(wanted)
    if image is not None and image == default_image():
        return (
            "run `make install` in a trcomp checkout and use .venv/bin/python, or "
            "`pip install 'trcomp[sdk-v2,container]'` in a venv of your own"
        )
    if image is not None:
        short = image.short.replace(".", "")
        return (
            f"run `make install-{short}` in a trcomp checkout, then set "
            f"{var}=.venv-{short}/bin/python; or, in a venv of your own, "
            f"`pip install 'trcomp[sdk-v2]' sagemaker-training redis torch=={wanted}` and set "
            f"{var} to its bin/python"
        )
    return (
        f"in a venv of your own, `pip install 'trcomp[sdk-v2]' sagemaker-training "
        f"torch=={wanted}` and set {var} to its bin/python"
    )


def _probe(python: str, var: str, environ: Mapping[str, str]) -> dict[str, Any]:
    try:
        done = subprocess.run(
            [python, "-c", _PROBE, *_JOB_MODULES],
            env=dict(environ),
            capture_output=True,
            text=True,
            timeout=120,
            check=False,
        )
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise LocalModeError(
            f"{var}={python!r} could not be run ({exc}): point it at the bin/python of an "
            "environment with that torch"
        ) from None
    try:
        found: dict[str, Any] = json.loads(done.stdout.strip().splitlines()[-1])
    except (IndexError, ValueError):
        raise LocalModeError(
            f"{var}={python!r} did not run as a Python (exit {done.returncode}): "
            f"{done.stderr.strip()[-500:]}; point it at an environment's bin/python"
        ) from None
    return found


def job_python(framework_version: str | None, environ: Mapping[str, str] | None = None) -> str:
    """The interpreter a process-mode job asking for ``framework_version`` runs on.

    ``framework_version`` None is trcomp's default version. ``environ`` is the
    environment the job will run with (it holds ``TRCOMP_PROCESS_PYTHON_*`` and the
    ``PYTHONPATH`` the other interpreter is probed with). Raises
    :class:`LocalModeError` when no interpreter has that torch.
    """
    environ = os.environ if environ is None else environ
    wanted = wanted_torch(framework_version)
    here = _installed_here()
    if _matches(wanted, here):
        return sys.executable
    if here is None and wanted == wanted_torch(None):
        # No torch at all, default version: the container-extra check that follows
        # names every missing package and the one pip command that brings them.
        return sys.executable
    var = env_var_for(wanted)
    asked = f"framework_version={framework_version!r}" if framework_version else "the default"
    chosen = environ.get(var)
    if not chosen:
        has = f"torch {here}" if here else "no torch"
        raise LocalModeError(
            f"process mode runs the job on a local torch, and {asked} asks for torch "
            f"{wanted}, but this Python ({sys.executable}) has {has} and {var} is not set: "
            f"{_how_to_get(wanted, var)}. (Docker local mode, instance_type='local', runs "
            "the job in the image of that version.)"
        )
    if not Path(chosen).is_file():
        raise LocalModeError(f"{var}={chosen!r} does not exist: {_how_to_get(wanted, var)}")
    found = _probe(chosen, var, environ)
    theirs = found.get("torch")
    if not isinstance(theirs, str) or not _matches(wanted, theirs):
        has = f"torch {theirs}" if theirs else "no torch"
        raise LocalModeError(
            f"{var}={chosen!r} has {has}, but {asked} asks for torch {wanted}: the job would "
            f"run on another torch than the one it asks for. {_how_to_get(wanted, var)}"
        )
    missing = found.get("missing")
    if missing:
        raise LocalModeError(
            f"{var}={chosen!r} has torch {theirs} but not {' or '.join(map(str, missing))} "
            f"(the training toolkit and trcomp's entrypoint): {_how_to_get(wanted, var)}"
        )
    return chosen
