"""The NCCL/EFA environment of multi-node torch_distributed jobs (pure)."""

from __future__ import annotations

from pathlib import Path

from trcomp_container.network import (
    distributed_environment,
    efa_device_count,
    efa_warning,
    nccl_net_plugin,
)

HOSTS = ["algo-1", "algo-2"]


def env_for(instance_type: str, efa: int, **environ: str) -> dict[str, str]:
    return distributed_environment(
        hosts=HOSTS,
        instance_type=instance_type,
        network_interface="ens5",
        efa_devices=efa,
        environ=environ,
    )


def test_p4d_with_efa_gets_the_toolkits_variables() -> None:
    assert env_for("ml.p4d.24xlarge", 4) == {
        "NCCL_SOCKET_IFNAME": "ens5",
        "FI_PROVIDER": "efa",
        "FI_EFA_USE_DEVICE_RDMA": "1",
        "RDMAV_FORK_SAFE": "1",
        "NCCL_PROTO": "simple",
    }


def test_efa_without_rdma_and_no_efa() -> None:
    g5 = env_for("ml.g5.48xlarge", 1)
    assert g5["FI_PROVIDER"] == "efa" and "FI_EFA_USE_DEVICE_RDMA" not in g5
    assert env_for("ml.g5.12xlarge", 0) == {"NCCL_SOCKET_IFNAME": "ens5"}


def test_one_host_needs_nothing_and_user_values_win() -> None:
    single = distributed_environment(
        hosts=["algo-1"],
        instance_type="ml.p5.48xlarge",
        network_interface="eth0",
        efa_devices=32,
        environ={},
    )
    assert single == {}
    mine = env_for("ml.p5.48xlarge", 32, NCCL_PROTO="LL128", NCCL_SOCKET_IFNAME="eth1")
    assert "NCCL_PROTO" not in mine and "NCCL_SOCKET_IFNAME" not in mine
    no_name = distributed_environment(
        hosts=HOSTS, instance_type=None, network_interface=None, efa_devices=0, environ={}
    )
    assert no_name == {"NCCL_SOCKET_IFNAME": "eth0"}


def test_efa_devices_and_the_nccl_plugin_are_found_on_disk(tmp_path: Path) -> None:
    (tmp_path / "uverbs0").touch()
    (tmp_path / "uverbs1").touch()
    assert efa_device_count(str(tmp_path)) == 2
    lib = tmp_path / "lib"
    lib.mkdir()
    assert nccl_net_plugin({"LD_LIBRARY_PATH": str(lib)}, dirs=()) is None
    (lib / "libnccl-net.so").touch()
    assert nccl_net_plugin({"LD_LIBRARY_PATH": str(lib)}, dirs=()) == str(lib / "libnccl-net.so")


def test_efa_without_the_plugin_is_a_warning() -> None:
    warning = efa_warning(hosts=HOSTS, efa_devices=4, plugin=None, instance_type="ml.p4d.24xlarge")
    assert warning and "TCP" in warning and "aws-ofi-nccl" in warning
    assert efa_warning(hosts=HOSTS, efa_devices=4, plugin="/x.so", instance_type=None) is None
    assert efa_warning(hosts=["a"], efa_devices=4, plugin=None, instance_type=None) is None
