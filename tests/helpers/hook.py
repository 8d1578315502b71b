"""The in-process metrics hook (trcomp_container/hook/): run a child under it, load its modules.

The hook directory is not a package: jobs put it on ``PYTHONPATH`` so Python runs its
``sitecustomize``. Tests do the same for a child process, and load a hook module into
this process by its path, without putting the directory on ``sys.path`` for every test.
"""

from __future__ import annotations

import importlib.util
import os
import subprocess
import sys
from pathlib import Path
from types import ModuleType

from trcomp_container.environment import HOOK_DIR

# The hook imports ``trcomp.contract``: the child takes it from this checkout, as a job does
# (tests/helpers/jobs.py), not from whichever copy the interpreter has installed.
_REPO = Path(__file__).resolve().parents[2]
_CHECKOUT = [str(_REPO / "sdk"), str(_REPO / "container")]

__all__ = ["hook_module", "run_hooked"]


def run_hooked(
    tmp_path: Path, code: str, extra_path: str = "", extra_env: dict[str, str] | None = None
) -> subprocess.CompletedProcess[str]:
    """Run ``code`` in a Python child with the hook on, as rank 3, metrics under tmp_path."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("TRCOMP_")}
    env.update(extra_env or {})
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(HOOK_DIR), extra_path, *_CHECKOUT]))
    env["TRCOMP_METRICS_DIR"] = str(tmp_path / "ranks")
    env["RANK"] = "3"
    return subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True)


def hook_module(name: str) -> ModuleType:
    """Import the hook's module ``name`` (e.g. ``trcomp_stepclock``) from its file.

    A hook module that imports a sibling (``trcomp_switch`` imports ``trcomp_aot``) gets
    the sibling loaded the same way first, whatever order the tests ran in.
    """
    if name in sys.modules:
        return sys.modules[name]
    spec = importlib.util.spec_from_file_location(name, HOOK_DIR / f"{name}.py")
    if spec is None or spec.loader is None:
        raise ImportError(f"no hook module {name!r} in {HOOK_DIR}")
    module = importlib.util.module_from_spec(spec)
    # Registered first: dataclasses and typing look the module up by name while it runs.
    sys.modules[name] = module
    try:
        spec.loader.exec_module(module)
    except ModuleNotFoundError as exc:
        del sys.modules[name]
        sibling = exc.name or ""
        if sibling in sys.modules or not (HOOK_DIR / f"{sibling}.py").is_file():
            raise
        hook_module(sibling)
        return hook_module(name)
    return module
