"""The launch command, computed without starting anything."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.helpers.engines import needs_torch_xla
from trcomp_container.devices import Devices
from trcomp_container.failures import ExitCode, JobFailed
from trcomp_container.launch import build_command, distribution_of, nproc_per_node

CODE = Path("/opt/ml/code")


def command(
    entry_point="train.py",
    args=(),
    distribution="none",
    nproc=1,
    hosts=("algo-1",),
    current="algo-1",
    environ=None,
):
    return build_command(
        code_dir=CODE,
        entry_point=entry_point,
        user_args=list(args),
        distribution=distribution,
        nproc=nproc,
        hosts=list(hosts),
        current_host=current,
        environ=environ or {},
        python="/py",
    )


def test_single_process_runs_the_script_with_hyperparameters_as_argv():
    evil = "; rm -rf / #"
    assert command(args=["--epochs", "3", "--name", evil]) == [
        "/py",
        "/opt/ml/code/train.py",
        "--epochs",
        "3",
        "--name",
        evil,
    ]


def test_shell_entry_points_get_argv_not_a_command_string():
    assert command("run.sh", ["--x", "$(reboot)"]) == [
        "/bin/sh",
        "/opt/ml/code/run.sh",
        "--x",
        "$(reboot)",
    ]


def test_torchrun_on_one_host_is_standalone():
    argv = command(args=["--lr", "0.1"], distribution="torch_distributed", nproc=2)
    assert argv[:3] == ["/py", "-m", "torch.distributed.run"]
    assert argv[3:] == [
        "--nnodes",
        "1",
        "--nproc-per-node",
        "2",
        "--standalone",
        "/opt/ml/code/train.py",
        "--lr",
        "0.1",
    ]


def test_torchrun_across_hosts_uses_the_first_sorted_host_as_master():
    argv = command(
        distribution="pytorchxla",
        nproc=8,
        hosts=("algo-2", "algo-1"),
        current="algo-2",
        environ={"TRCOMP_MASTER_PORT": "7777"},
    )
    assert argv[3:-1] == [
        "--nnodes",
        "2",
        "--nproc-per-node",
        "8",
        "--node-rank",
        "1",
        "--master-addr",
        "algo-1",
        "--master-port",
        "7777",
    ]


def test_distributed_shell_scripts_are_refused():
    with pytest.raises(JobFailed) as caught:
        command("run.sh", distribution="torch_distributed", nproc=2)
    assert caught.value.errno == ExitCode.CONFIG


@pytest.mark.parametrize(
    ("params", "expected"),
    [
        ({}, "none"),
        ({"sagemaker_torch_distributed_enabled": True}, "torch_distributed"),
        ({"sagemaker_pytorch_ddp_enabled": "true"}, "torch_distributed"),
        ({"sagemaker_pytorch_xla_multi_worker_enabled": True}, "pytorchxla"),
        ({"sagemaker_torch_distributed_enabled": False}, "none"),
    ],
)
def test_distribution_of(params, expected):
    assert distribution_of(params) == expected


def test_mpi_is_refused_with_the_alternative():
    with pytest.raises(JobFailed, match="torch_distributed"):
        distribution_of({"sagemaker_mpi_enabled": True})


def test_nproc_per_node():
    assert nproc_per_node("none", "inductor", Devices(gpus=8), {}) == 1
    assert nproc_per_node("torch_distributed", "inductor", Devices(gpus=8), {}) == 8
    assert nproc_per_node("pytorchxla", "xla", Devices(tpus=4), {}) == 4
    assert nproc_per_node("torch_distributed", None, Devices(), {}) == 1
    assert nproc_per_node("torch_distributed", None, Devices(), {"TRCOMP_NPROC_PER_NODE": "2"}) == 2
    with pytest.raises(JobFailed):
        nproc_per_node("torch_distributed", None, Devices(), {"TRCOMP_NPROC_PER_NODE": "two"})
    with pytest.raises(JobFailed, match="world of one"):
        nproc_per_node("pytorchxla", "xla", Devices(), {"TRCOMP_NPROC_PER_NODE": "2"})


_XLA_WORLD = """
import torch_xla.runtime as xr
print("world", xr.world_size(), flush=True)
"""


@pytest.mark.slow
@needs_torch_xla
def test_torch_xla_on_cpu_gives_each_torchrun_process_a_world_of_one(tmp_path):
    """Why pytorchxla refuses several processes per CPU host; fails once torch-xla changes."""
    script = tmp_path / "world.py"
    script.write_text(_XLA_WORLD)
    env = {k: v for k, v in os.environ.items() if not k.startswith(("XLA_", "PJRT_", "TRCOMP_"))}
    env["PJRT_DEVICE"] = "CPU"
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "torch.distributed.run",
            "--standalone",
            "--nproc-per-node",
            "2",
            str(script),
        ],
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.split("\n").count("world 1") == 2, done.stdout
