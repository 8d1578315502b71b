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
        training._check_backend(
            config, "xla", Devices(gpus=8), {}, training._Report(), None, engine="jax"
        )
    assert caught.value.errno == ExitCode.COMPILER_UNAVAILABLE
    assert "backend='inductor'" in caught.value.reason and "no CUDA" in caught.value.reason


def test_known_failures_come_with_the_one_line_fix():
    from trcomp_container.hints import hint_for
    from trcomp_container.inprocess.record import ErrorReport

    fused = ErrorReport("RuntimeError", "`fused=True` requires all the params to be")
    assert "optim='adamw_torch'" in (hint_for("xla", fused) or "")
    assert hint_for("inductor", fused) is None
    assert hint_for("xla", ErrorReport("ValueError", "bad")) is None


def test_cpu_inductor_needs_a_cxx_compiler():
    import os

    from trcomp_container.probe import cpu_inductor_check

    missing = cpu_inductor_check({"CXX": "/nonexistent/c++", "PATH": os.environ["PATH"]})
    assert not missing.ok and "C++ compiler" in missing.reason
    assert cpu_inductor_check({"PATH": os.environ["PATH"]}).ok


@pytest.mark.parametrize(
    ("config", "devices", "expected"),
    [
        (TrainingCompilerConfig(backend="xla"), Devices(gpus=8), "jax"),
        (TrainingCompilerConfig(backend="xla"), Devices(), "torch_xla"),
        (TrainingCompilerConfig(backend="xla", xla_engine="jax"), Devices(), "jax"),
        (TrainingCompilerConfig(), Devices(gpus=1), "inductor"),
        (TrainingCompilerConfig(enabled=False), Devices(gpus=1), None),
    ],
)
def test_resolve_engine(config, devices, expected):
    from trcomp_container.backends import resolve_engine

    assert resolve_engine(config, resolve_backend(config, devices), devices) == expected


def test_jax_engine_refuses_per_device_distributions_and_several_hosts():
    from trcomp_container.training import _check_jax_distribution

    _check_jax_distribution("jax", "none", ["algo-1"])
    _check_jax_distribution("inductor", "torch_distributed", ["algo-1", "algo-2"])
    with pytest.raises(JobFailed, match="one process") as caught:
        _check_jax_distribution("jax", "torch_distributed", ["algo-1"])
    assert caught.value.errno == ExitCode.CONFIG
    with pytest.raises(JobFailed, match="multi-host"):
        _check_jax_distribution("jax", "none", ["algo-1", "algo-2"])


@pytest.mark.slow
def test_jax_probe_on_a_gpu_host_without_the_cuda_plugin_fails():
    """JAX_PLATFORMS=cuda without the plugin: the probe says so instead of running on CPU."""
    import os

    from trcomp_container.probe import run_probe

    env = {**os.environ, "JAX_PLATFORMS": "cuda"}
    result = run_probe("jax", 1, env)
    assert not result.ok
    assert "cuda" in result.reason.lower()


@pytest.mark.slow
def test_jax_probe_on_cpu_passes():
    import os

    from trcomp_container.probe import run_probe

    result = run_probe("jax", 0, {**os.environ, "JAX_PLATFORMS": "cpu"})
    assert result.ok, result.reason
    assert "torchax 0.0.13" in result.hardware


def test_report_for_the_doctor(capsys: pytest.CaptureFixture[str]) -> None:
    """``python -m trcomp_container.backends --json``: what ``trcomp doctor`` reads."""
    import json

    from trcomp_container.backends.__main__ import main, report

    assert main(["--json"]) == 0
    printed = json.loads(capsys.readouterr().out)
    assert printed == report()
    assert printed["backend_on_gpu"] == "inductor"
    if printed["kind"] == "cpu":
        assert printed == {
            "devices": "CPU only",
            "kind": "cpu",
            "gpu_names": [],
            "backend_here": "inductor",
            "backend_on_gpu": "inductor",
        }
