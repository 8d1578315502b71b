"""The compatibility set of a compile cache: what must match for an entry to be loadable.

Compiled kernels depend on the compiler versions (torch, triton, torch-xla,
jax, jaxlib, torchax), the CUDA toolkit torch was built with, the GPU model
(or the CPU architecture), the Python version and the trcomp version that
set the compilers up. Entries written under one set are kept under its own
key prefix in the shared cache, so a job never loads another set's entries.
Read without importing torch or JAX: package metadata and ``nvidia-smi``.
"""

from __future__ import annotations

import hashlib
import importlib.metadata
import importlib.util
import json
import platform
import re
import sys
from pathlib import Path

from trcomp._version import __version__

__all__ = ["CompatSet", "compat_set", "gpu_models"]

_PACKAGES = ("torch", "triton", "torch_xla", "jax", "jaxlib", "torchax")
_GPU_NAME = re.compile(r"^GPU \d+: (.+?)(?: \(UUID: .*\))?$")


def _version(package: str) -> str | None:
    try:
        return importlib.metadata.version(package)
    except importlib.metadata.PackageNotFoundError:
        return None


def _torch_cuda() -> str | None:
    """The CUDA version torch was built with, from ``torch/version.py`` (not importing torch)."""
    spec = importlib.util.find_spec("torch")
    if spec is None or not spec.submodule_search_locations:
        return None
    version_file = Path(next(iter(spec.submodule_search_locations))) / "version.py"
    try:
        found = re.search(r"^cuda: .*= ['\"]([^'\"]+)['\"]", version_file.read_text(), re.M)
    except OSError:
        return None
    return found.group(1) if found else None


def gpu_models(listing: str | None) -> list[str]:
    """The distinct GPU models in ``nvidia-smi --list-gpus`` output, sorted."""
    names = set()
    for line in (listing or "").splitlines():
        found = _GPU_NAME.match(line.strip())
        if found:
            names.add(found.group(1).strip())
    return sorted(names)


class CompatSet(dict[str, str | None]):
    """The facts entries must match, and :attr:`key`, the prefix they are kept under."""

    @property
    def key(self) -> str:
        """A readable, path-safe name: ``torch2.9.0-cu12.8-<device>-<hash of every fact>``."""
        digest = hashlib.sha256(json.dumps(self, sort_keys=True).encode()).hexdigest()[:16]
        device = re.sub(r"[^A-Za-z0-9.]+", "_", self.get("device") or "cpu").strip("_")
        cuda = f"-cu{self['cuda']}" if self.get("cuda") else ""
        return f"torch{self.get('torch') or 'none'}{cuda}-{device[:40]}-{digest}"


def compat_set(*, engine: str | None, gpu_listing: str | None) -> CompatSet:
    """The compatibility set of this host and image for ``engine``."""
    facts: dict[str, str | None] = {name: _version(name) for name in _PACKAGES}
    gpus = gpu_models(gpu_listing)
    facts.update(
        cuda=_torch_cuda(),
        device="+".join(gpus) if gpus else f"cpu-{platform.machine()}",
        python=f"{sys.version_info.major}.{sys.version_info.minor}",
        trcomp=__version__,
        engine=engine,
    )
    return CompatSet(facts)
