"""``python -m trcomp_container.backends --json``: the devices here and what ``auto`` picks.

``trcomp doctor`` runs this in a child (the SDK never imports the container
package) and prints what it says. One JSON object on stdout: ``devices`` (as
the entrypoint describes them), ``kind`` (``gpu``, ``tpu`` or ``cpu``),
``gpu_names`` (``nvidia-smi --list-gpus`` lines without their UUIDs),
``backend_here`` (what ``backend='auto'`` resolves to here) and
``backend_on_gpu`` (on an 8-GPU instance).
"""

from __future__ import annotations

import json
import sys
from collections.abc import Sequence

from trcomp.contract.config import TrainingCompilerConfig
from trcomp_container.backends import resolve_backend
from trcomp_container.devices import Devices, detect_devices, list_gpus, parse_gpu_listing

__all__ = ["main", "report"]


def report() -> dict[str, object]:
    """The devices here and the backend ``auto`` resolves to, here and on a GPU instance."""
    listing = list_gpus()
    devices = detect_devices(len(parse_gpu_listing(listing or "")), listing=listing)
    config = TrainingCompilerConfig()
    return {
        "devices": str(devices),
        "kind": devices.kind,
        "gpu_names": [
            line.split(" (UUID")[0]
            for line in (listing or "").splitlines()
            if line.startswith("GPU ")
        ],
        "backend_here": resolve_backend(config, devices),
        "backend_on_gpu": resolve_backend(config, Devices(gpus=8)),
    }


def main(argv: Sequence[str] | None = None) -> int:
    """Print :func:`report` (``--json``: as one JSON object; else one line per field)."""
    args = list(sys.argv[1:] if argv is None else argv)
    found = report()
    if "--json" in args:
        print(json.dumps(found))
    else:
        for key, value in found.items():
            print(f"{key}: {value}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
