"""What the entrypoint does with the GPUs it sees (simulated device lists, probe answers)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from trcomp.config import TrainingCompilerConfig
from trcomp_container import training
from trcomp_container.backends import resolve_engine
from trcomp_container.devices import Devices, detect_devices
from trcomp_container.failures import ExitCode, JobFailed
from trcomp_container.gpu_setup import launch_environment, require_visible_gpus
from trcomp_container.job import Job, JobPaths
from trcomp_container.launch import nproc_per_node, single_process_note
from trcomp_container.probe import ProbeResult

EIGHT = "\n".join(f"GPU {i}: NVIDIA A100 (UUID: GPU-{i}000aaaa-1111)" for i in range(8))


def job(tmp_path: Path, instance_type: str, **environ: str) -> Job:
    return Job(
        paths=JobPaths.under(tmp_path),
        framework_params={},
        user_args=[],
        toolkit_env={},
        entry_point="train.py",
        module_dir="",
        hosts=["algo-1"],
        current_host="algo-1",
        num_gpus=0,
        num_cpus=96,
        environ=environ,
        instance_type=instance_type,
    )


@pytest.mark.parametrize("instance_type", ["ml.p4d.24xlarge", "ml.g5.2xlarge", "local_gpu"])
def test_a_gpu_instance_that_sees_no_gpu_fails_before_training(
    tmp_path: Path, instance_type: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("PATH", str(tmp_path))  # no nvidia-smi in this "container"
    with pytest.raises(JobFailed) as caught:
        require_visible_gpus(job(tmp_path, instance_type), Devices())
    assert caught.value.errno == ExitCode.COMPILER_UNAVAILABLE
    assert "sees none" in caught.value.reason
    assert "NVIDIA_VISIBLE_DEVICES=all" in caught.value.reason
    assert "does not train on CPU" in caught.value.reason


def test_cuda_visible_devices_that_hides_every_gpu_is_named(tmp_path: Path) -> None:
    the_job = job(tmp_path, "ml.p4d.24xlarge", CUDA_VISIBLE_DEVICES="")
    devices = detect_devices(8, the_job.environ, EIGHT)
    with pytest.raises(JobFailed, match="CUDA_VISIBLE_DEVICES='' hides all 8 GPUs"):
        require_visible_gpus(the_job, devices)


def test_cpu_instances_and_gpu_instances_with_gpus_pass(tmp_path: Path) -> None:
    require_visible_gpus(job(tmp_path, "ml.c5.xlarge"), Devices())
    require_visible_gpus(job(tmp_path, "local_process"), Devices())
    require_visible_gpus(job(tmp_path, "ml.g5.2xlarge"), Devices(gpus=1))


def test_compile_threads_share_the_cpus_and_the_users_value_wins(tmp_path: Path) -> None:
    the_job = job(tmp_path, "ml.p4d.24xlarge")  # 96 CPUs
    extra, warnings = launch_environment(the_job, "inductor", 8, {})
    assert extra == {"TORCHINDUCTOR_COMPILE_THREADS": "12"} and warnings == []
    mine = {"TORCHINDUCTOR_COMPILE_THREADS": "4"}
    assert launch_environment(the_job, "inductor", 8, mine) == ({}, [])
    assert launch_environment(the_job, None, 8, {}) == ({}, [])


def test_two_visible_of_eight_launch_two_processes() -> None:
    devices = detect_devices(8, {"CUDA_VISIBLE_DEVICES": "0,1"}, EIGHT)
    assert nproc_per_node("torch_distributed", "inductor", devices, {}) == 2


def test_one_process_on_a_multi_gpu_host_is_a_warning() -> None:
    note = single_process_note("none", Devices(gpus=8), "ml.p4d.24xlarge")
    assert note and "1 of 8 GPUs" in note and "torch_distributed" in note
    assert single_process_note("torch_distributed", Devices(gpus=8), None) is None
    assert single_process_note("none", Devices(gpus=1), None) is None


def check(
    monkeypatch: pytest.MonkeyPatch,
    answer: ProbeResult,
    devices: Devices,
    config: TrainingCompilerConfig,
    backend: Any = "inductor",
) -> tuple[Any, dict[str, str], Devices, training._Report]:
    monkeypatch.setattr(training, "run_probe", lambda *args: answer)
    report = training._Report()
    chosen, env, seen = training._check_backend(
        config,
        backend,
        devices,
        {},
        report,
        lambda chosen, why: {"FALLBACK": str(why)},
        engine=resolve_engine(config, backend, devices),
    )
    return chosen, env, seen, report


def test_torch_seeing_fewer_gpus_is_used_not_fatal(monkeypatch: pytest.MonkeyPatch) -> None:
    answer = ProbeResult(True, hardware="cuda x2", gpus_seen=2)
    config = TrainingCompilerConfig(fallback="eager")
    chosen, _, devices, report = check(monkeypatch, answer, Devices(gpus=8), config)
    assert chosen == "inductor" and devices.gpus == 2
    assert "torch sees 2" in report.warnings[0]


def test_a_compile_failure_on_gpus_falls_back_to_eager_on_the_gpus(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    answer = ProbeResult(False, "RuntimeError: Failed to find C compiler", gpus_seen=8)
    chosen, env, devices, report = check(
        monkeypatch, answer, Devices(gpus=8), TrainingCompilerConfig(fallback="eager")
    )
    assert chosen is None and devices.gpus == 8
    assert "C compiler" in report.warnings[0] and "EAGER" in env["FALLBACK"]
    with pytest.raises(JobFailed, match="C compiler"):
        check(monkeypatch, answer, Devices(gpus=8), TrainingCompilerConfig(fallback="fail"))


def test_compiler_off_on_gpus_still_refuses_cpu(monkeypatch: pytest.MonkeyPatch) -> None:
    answer = ProbeResult(False, "torch sees none of the 8 GPUs", gpus_seen=0)
    config = TrainingCompilerConfig(enabled=False)
    with pytest.raises(JobFailed, match="never trains on CPU"):
        check(monkeypatch, answer, Devices(gpus=8), config, backend=None)
