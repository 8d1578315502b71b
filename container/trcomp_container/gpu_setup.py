"""What a job's GPUs and hosts require before the launch: GPUs that are really there,
compile workers shared by the ranks, and NCCL/EFA variables across hosts.
"""

from __future__ import annotations

import shutil

from trcomp.contract.instances import describe_instance, gpu_count
from trcomp_container import network
from trcomp_container.backends import ConcreteBackend, inductor
from trcomp_container.devices import Devices
from trcomp_container.failures import ExitCode, JobFailed
from trcomp_container.job import Job

__all__ = ["launch_environment", "require_visible_gpus"]


def require_visible_gpus(job: Job, devices: Devices) -> None:
    """Fail before anything starts when the instance has GPUs and the job sees none."""
    expected = gpu_count(job.instance_type)
    has_gpus = bool(expected) or describe_instance(job.instance_type).kind == "local_gpu"
    if not has_gpus or devices.gpus:
        return
    count = f"{expected} NVIDIA GPU(s)" if expected else "NVIDIA GPUs"
    selector = job.environ.get("CUDA_VISIBLE_DEVICES")
    if devices.host_gpus and selector is not None:
        why = (
            f"CUDA_VISIBLE_DEVICES={selector!r} hides all {devices.host_gpus} GPUs that "
            "nvidia-smi lists; unset it or name visible GPUs"
        )
    elif shutil.which("nvidia-smi") is None:
        why = (
            "nvidia-smi is not in the container, so the NVIDIA container runtime did not mount "
            f"the driver (NVIDIA_VISIBLE_DEVICES={job.environ.get('NVIDIA_VISIBLE_DEVICES')!r}). "
            "Use an image that sets NVIDIA_VISIBLE_DEVICES=all and NVIDIA_DRIVER_CAPABILITIES="
            "compute,utility (trcomp's image does); in local_gpu mode install the NVIDIA "
            "Container Toolkit"
        )
    else:
        why = (
            "nvidia-smi lists no GPU: the driver does not see them; check `nvidia-smi` on the host"
        )
    raise JobFailed(
        f"{job.instance_type} has {count} but the job sees none: {why}. trcomp does not train "
        "on CPU on a GPU instance.",
        ExitCode.COMPILER_UNAVAILABLE,
    )


def launch_environment(
    job: Job, backend: ConcreteBackend | None, nproc: int, env: dict[str, str]
) -> tuple[dict[str, str], list[str]]:
    """Variables that depend on the launch, and warnings: compile threads, NCCL/EFA.

    Only variables missing from ``env`` are returned: a value the user set wins.
    """
    extra: dict[str, str] = {}
    if backend == "inductor":
        extra.update(inductor.compile_threads(job.num_cpus, nproc))
    efa = network.efa_device_count()
    extra.update(
        network.distributed_environment(
            hosts=job.hosts,
            instance_type=job.instance_type or None,
            network_interface=job.network_interface or None,
            efa_devices=efa,
            environ=env,
        )
    )
    warning = network.efa_warning(
        hosts=job.hosts,
        efa_devices=efa,
        plugin=network.nccl_net_plugin(env),
        instance_type=job.instance_type or None,
    )
    extra = {key: value for key, value in extra.items() if key not in env}
    return extra, [warning] if warning else []
