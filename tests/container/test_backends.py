"""Backend resolution, device detection and the failure contract's pure parts."""

from __future__ import annotations

import pytest

from trcomp.config import TrainingCompilerConfig
from trcomp_container.backends import resolve_backend
from trcomp_container.devices import Devices, detect_devices
from trcomp_container.failures import ExitCode, JobFailed, describe_exit, write_failure


@pytest.mark.parametrize(
    ("backend", "devices", "expected"),
    [
        ("auto", Devices(gpus=8), "inductor"),
        ("auto", Devices(tpus=4), "xla"),
        ("auto", Devices(), "inductor"),
        ("xla", Devices(), "xla"),
        ("xla", Devices(gpus=1), "xla"),  # the probe then decides whether it drives the GPU
        ("inductor", Devices(gpus=1), "inductor"),
    ],
)
def test_resolve_backend(backend, devices, expected):
    assert resolve_backend(TrainingCompilerConfig(backend=backend), devices) == expected


def test_disabled_resolves_to_none():
    assert resolve_backend(TrainingCompilerConfig(enabled=False), Devices(gpus=8)) is None


def test_inductor_on_tpu_fails_fast():
    with pytest.raises(JobFailed, match="backend='xla'") as caught:
        resolve_backend(TrainingCompilerConfig(backend="inductor"), Devices(tpus=4))
    assert caught.value.errno == ExitCode.COMPILER_UNAVAILABLE


def test_detect_devices_uses_the_gpu_count_and_tpu_markers():
    assert detect_devices(2, {}).gpus == 2
    assert detect_devices(0, {"TPU_ACCELERATOR_TYPE": "v5litepod-8"}).kind == "tpu"


@pytest.mark.parametrize(
    ("returncode", "code", "words"),
    [
        (0, 0, "exited with code 0"),
        (3, 3, "code 3"),
        (-9, 137, "probably out of memory"),
        (-15, 143, "SIGTERM"),
    ],
)
def test_describe_exit(returncode, code, words):
    exit_code, reason = describe_exit(returncode)
    assert exit_code == code and words in reason


def test_failure_file_is_written_once(tmp_path):
    write_failure(tmp_path, "first reason")
    write_failure(tmp_path, "second reason")
    assert (tmp_path / "failure").read_text() == "first reason\n"


def test_gpu_hosts_never_fall_back_to_cpu(monkeypatch):
    from trcomp_container import training
    from trcomp_container.probe import ProbeResult

    monkeypatch.setattr(training, "run_probe", lambda *args: ProbeResult(False, "no CUDA"))
    config = TrainingCompilerConfig(backend="xla", fallback="eager")
    with pytest.raises(JobFailed) as caught:
        training._check_backend(config, "xla", Devices(gpus=8), {}, training._Report(), None)
    assert caught.value.errno == ExitCode.COMPILER_UNAVAILABLE
    assert "backend='inductor'" in caught.value.reason and "no CUDA" in caught.value.reason


def test_known_failures_come_with_the_one_line_fix():
    from trcomp_container.hints import hint_for

    fused = {"type": "RuntimeError", "message": "`fused=True` requires all the params to be"}
    assert "optim='adamw_torch'" in (hint_for("xla", fused) or "")
    assert hint_for("inductor", fused) is None
    assert hint_for("xla", {"type": "ValueError", "message": "bad"}) is None


def test_cpu_inductor_needs_a_cxx_compiler():
    import os

    from trcomp_container.probe import cpu_inductor_check

    missing = cpu_inductor_check({"CXX": "/nonexistent/c++", "PATH": os.environ["PATH"]})
    assert not missing.ok and "C++ compiler" in missing.reason
    assert cpu_inductor_check({"PATH": os.environ["PATH"]}).ok
