"""NCCL and EFA environment for multi-node ``torch_distributed`` jobs (pure).

trcomp launches torchrun itself instead of the training toolkit's
torch-distributed runner, so it sets what that runner set:

- ``NCCL_SOCKET_IFNAME``: the interface SageMaker gives the job
  (``network_interface_name`` in resourceconfig.json; ``eth0`` when absent),
  so NCCL does not bootstrap over the wrong one;
- with EFA devices present (``/dev/infiniband/uverbs*``): ``FI_PROVIDER=efa``
  (libfabric uses EFA), ``RDMAV_FORK_SAFE=1`` (DataLoader workers fork after
  memory was registered for RDMA), ``NCCL_PROTO=simple`` (EFA may deliver out
  of order) and, on families whose EFA does RDMA (p4d, p4de, p5*),
  ``FI_EFA_USE_DEVICE_RDMA=1``.

Every variable is a default: a value the user set wins. NCCL reaches EFA only
through the aws-ofi-nccl plugin (``libnccl-net*.so``), which comes with the
AWS Deep Learning Container images and the EFA installer, not from PyPI or
Debian; without it NCCL runs over TCP sockets, and :func:`efa_warning` says so.
"""

from __future__ import annotations

import glob
import os
from collections.abc import Iterable, Mapping

from trcomp.contract.instances import EFA_RDMA_FAMILIES

__all__ = [
    "DEFAULT_INTERFACE",
    "distributed_environment",
    "efa_device_count",
    "efa_warning",
    "nccl_net_plugin",
]

DEFAULT_INTERFACE = "eth0"
_PLUGIN_DIRS = (
    "/opt/amazon/ofi-nccl/lib",
    "/opt/amazon/ofi-nccl/lib64",
    "/opt/aws-ofi-nccl/lib",
    "/usr/local/lib",
    "/usr/lib/x86_64-linux-gnu",
    "/usr/lib/aarch64-linux-gnu",
)


def efa_device_count(dev_root: str = "/dev/infiniband") -> int:
    """EFA (RDMA verbs) devices passed into the container."""
    return len(glob.glob(os.path.join(dev_root, "uverbs[0-9]*")))


def _family(instance_type: str | None) -> str:
    parts = (instance_type or "").split(".")
    return parts[1] if len(parts) == 3 and parts[0] == "ml" else ""


def distributed_environment(
    *,
    hosts: list[str],
    instance_type: str | None,
    network_interface: str | None,
    efa_devices: int,
    environ: Mapping[str, str],
) -> dict[str, str]:
    """The NCCL/EFA variables for a torchrun job over ``hosts``; {} for one host.

    Only variables missing from ``environ`` are returned.
    """
    if len(hosts) < 2:
        return {}
    env = {"NCCL_SOCKET_IFNAME": network_interface or DEFAULT_INTERFACE}
    if efa_devices:
        env.update(FI_PROVIDER="efa", RDMAV_FORK_SAFE="1", NCCL_PROTO="simple")
        if _family(instance_type) in EFA_RDMA_FAMILIES:
            env["FI_EFA_USE_DEVICE_RDMA"] = "1"
    return {key: value for key, value in env.items() if key not in environ}


def nccl_net_plugin(environ: Mapping[str, str], dirs: Iterable[str] = _PLUGIN_DIRS) -> str | None:
    """The path of an NCCL network plugin (aws-ofi-nccl) NCCL would load, if any."""
    search = [d for d in environ.get("LD_LIBRARY_PATH", "").split(":") if d] + list(dirs)
    for directory in search:
        found = sorted(glob.glob(os.path.join(directory, "libnccl-net*.so*")))
        if found:
            return found[0]
    return None


def efa_warning(
    *, hosts: list[str], efa_devices: int, plugin: str | None, instance_type: str | None
) -> str | None:
    """Why a multi-node job will not use EFA although the host has it; None when fine."""
    if len(hosts) < 2 or not efa_devices or plugin is not None:
        return None
    where = instance_type or "this host"
    return (
        f"{where} has {efa_devices} EFA device(s) but the image has no NCCL network "
        "plugin (aws-ofi-nccl, libnccl-net*.so): NCCL will run over TCP sockets, several "
        "times slower between nodes. Build the image on an AWS Deep Learning Container "
        "(make image BASE_IMAGE=<DLC PyTorch training image>), which carries EFA and aws-ofi-nccl."
    )
