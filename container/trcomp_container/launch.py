"""The launch command for the user's entry point, as a pure function.

One process runs the script directly, as the training toolkit does; the
``torch_distributed``/``pytorchddp`` and ``pytorchxla`` distributions run it
under torchrun, one process per local device, across the hosts of
resourceconfig.json. Hyperparameters are argv elements: no shell ever parses them.
"""

from __future__ import annotations

import sys
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from trcomp.contract.distribution import Launched, launched_distribution
from trcomp.contract.env import MASTER_PORT_ENV, NPROC_PER_NODE_ENV
from trcomp.contract.errors import UnsupportedJobError
from trcomp.contract.instances import single_process_warning
from trcomp_container.backends import ConcreteBackend
from trcomp_container.devices import Devices
from trcomp_container.failures import ExitCode, JobFailed

__all__ = [
    "Distribution",
    "LaunchPlan",
    "build_command",
    "distribution_of",
    "entry_point_command",
    "nproc_per_node",
    "single_process_note",
]

Distribution = Launched

DEFAULT_MASTER_PORT = 29500


@dataclass(frozen=True)
class LaunchPlan:
    """What to run, in which environment and directory."""

    command: list[str]
    env: dict[str, str]
    cwd: Path


def distribution_of(framework_params: Mapping[str, Any]) -> Distribution:
    """Which distribution the job's ``sagemaker_*`` parameters ask for (the contract's rule)."""
    try:
        return launched_distribution(framework_params)
    except UnsupportedJobError as exc:
        raise JobFailed(str(exc), ExitCode.CONFIG) from None


def nproc_per_node(
    distribution: Distribution,
    backend: ConcreteBackend | None,
    devices: Devices,
    environ: Mapping[str, str],
) -> int:
    """Processes per host: one per GPU (or TPU chip under xla); on CPU ``TRCOMP_NPROC_PER_NODE``."""
    if distribution == "none":
        return 1
    explicit = environ.get(NPROC_PER_NODE_ENV)
    if explicit:
        try:
            count = int(explicit)
        except ValueError:
            count = 0
        if count < 1:
            raise JobFailed(
                f"{NPROC_PER_NODE_ENV}={explicit!r} is not a positive whole number",
                ExitCode.CONFIG,
            )
        if count > 1 and distribution == "pytorchxla" and not (devices.gpus or devices.tpus):
            raise JobFailed(
                f"{NPROC_PER_NODE_ENV}={count} with the pytorchxla distribution on CPU: "
                "torch-xla 2.9 gives every CPU process a world of one, so the processes "
                "would train separately. Unset it, or use torch_distributed to test "
                "multi-process training on CPU.",
                ExitCode.CONFIG,
            )
        return count
    if devices.gpus:
        return devices.gpus
    if devices.tpus and backend == "xla":
        return devices.tpus
    return 1


def single_process_note(
    distribution: Distribution, devices: Devices, instance_type: str | None
) -> str | None:
    """The warning for one process on several visible GPUs (no distribution); else None."""
    if distribution != "none" or devices.gpus < 2:
        return None
    return single_process_warning(instance_type, devices.gpus)


def entry_point_command(code_dir: Path, entry_point: str, python: str) -> list[str]:
    """How to start the entry point alone: a Python script, a package module, or a command."""
    path = code_dir / entry_point
    if entry_point.endswith(".sh"):
        return ["/bin/sh", str(path)]
    if (code_dir / "setup.py").exists():
        return [python, "-m", entry_point.removesuffix(".py").replace("/", ".")]
    if entry_point.endswith(".py"):
        return [python, str(path)]
    return [str(path)]


def build_command(
    *,
    code_dir: Path,
    entry_point: str,
    user_args: list[str],
    distribution: Distribution,
    nproc: int,
    hosts: list[str],
    current_host: str,
    environ: Mapping[str, str],
    python: str = sys.executable,
) -> list[str]:
    """The argv to execute; ``user_args`` are the toolkit's ``--key value`` hyperparameters."""
    single = entry_point_command(code_dir, entry_point, python)
    if distribution == "none":
        return [*single, *user_args]
    if single[0] != python:
        raise JobFailed(
            f"entry point {entry_point!r} is not a Python script; the {distribution} "
            "distribution runs Python scripts under torchrun. Use a .py entry point.",
            ExitCode.CONFIG,
        )
    ordered = sorted(hosts)
    torchrun = [python, "-m", "torch.distributed.run", "--nnodes", str(len(ordered))]
    torchrun += ["--nproc-per-node", str(nproc)]
    if len(ordered) == 1:
        torchrun.append("--standalone")
    else:
        port = environ.get(MASTER_PORT_ENV, str(DEFAULT_MASTER_PORT))
        torchrun += ["--node-rank", str(ordered.index(current_host))]
        torchrun += ["--master-addr", ordered[0], "--master-port", port]
    if single[1] == "-m":
        torchrun.append("--module")
    return [*torchrun, *single[1:], *user_args]
