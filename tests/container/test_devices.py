"""Visible GPUs from simulated nvidia-smi listings and CUDA_VISIBLE_DEVICES, MIG included."""

from __future__ import annotations

import pytest

from trcomp_container.devices import detect_devices, parse_gpu_listing, visible_gpus

EIGHT = "\n".join(
    f"GPU {i}: NVIDIA H100 80GB HBM3 (UUID: GPU-{i}{i}{i}{i}aaaa-1111-2222-3333-44445555666{i})"
    for i in range(8)
)
MIG = """GPU 0: NVIDIA A100-SXM4-40GB (UUID: GPU-5d5ba0d6-d33d-2b2c-524d-9e3d8d2b8a77)
  MIG 3g.20gb     Device  0: (UUID: MIG-c6d4f1ef-42e4-5de3-91c7-45d71c87eb3f)
  MIG 3g.20gb     Device  1: (UUID: MIG-cba663e8-9bed-5b25-b243-5985ef7c9beb)
"""


def test_listing_has_uuids_and_mig_instances() -> None:
    (gpu,) = parse_gpu_listing(MIG)
    assert gpu.uuid == "GPU-5d5ba0d6-d33d-2b2c-524d-9e3d8d2b8a77"
    assert gpu.mig == (
        "MIG-c6d4f1ef-42e4-5de3-91c7-45d71c87eb3f",
        "MIG-cba663e8-9bed-5b25-b243-5985ef7c9beb",
    )
    assert len(parse_gpu_listing(EIGHT)) == 8


@pytest.mark.parametrize(
    ("selector", "count"),
    [
        (None, 8),
        ("0,1", 2),
        ("7", 1),
        ("GPU-3333aaaa,GPU-5555", 2),  # UUID prefixes, as CUDA accepts them
        ("0,9,1", 1),  # CUDA stops at the first entry that names no device
        ("", 0),
        ("-1", 0),
        ("0,0", 0),  # a device named twice: CUDA rejects the list
        ("GPU-deadbeef", 0),
    ],
)
def test_cuda_visible_devices_decides_the_count(selector: str | None, count: int) -> None:
    env = {} if selector is None else {"CUDA_VISIBLE_DEVICES": selector}
    devices = detect_devices(8, env, EIGHT)
    assert devices.gpus == count
    assert devices.host_gpus == 8


def test_two_of_eight_are_two_gpus_with_a_note() -> None:
    devices = detect_devices(8, {"CUDA_VISIBLE_DEVICES": "0,1"}, EIGHT)
    assert str(devices) == "2 NVIDIA GPU(s) (of 8 on the host)"
    assert "leaves 2 of the 8 GPUs" in devices.notes[0]


def test_without_a_listing_indices_still_select() -> None:
    assert detect_devices(4, {"CUDA_VISIBLE_DEVICES": "2,3"}, "").gpus == 2


def test_mig_instances_mean_one_process_on_one_instance() -> None:
    assert visible_gpus(parse_gpu_listing(MIG), None) == (2, True)
    devices = detect_devices(1, {}, MIG)
    assert devices.gpus == 1 and devices.mig
    assert "one MIG UUID per job" in devices.notes[0]
    one = detect_devices(1, {"CUDA_VISIBLE_DEVICES": "MIG-cba663e8"}, MIG)
    assert (one.gpus, one.mig, one.notes) == (1, True, ())
    old_style = "MIG-GPU-5d5ba0d6-d33d-2b2c-524d-9e3d8d2b8a77/1/0"
    assert detect_devices(1, {"CUDA_VISIBLE_DEVICES": old_style}, MIG).gpus == 1


def test_no_gpus_is_cpu() -> None:
    devices = detect_devices(0, {}, None)
    assert (devices.gpus, devices.kind, str(devices)) == (0, "cpu", "CPU only")
