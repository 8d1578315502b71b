"""Old-product torch-xla scripts on a GPU host stop before training, with the replacements.

The GPU host is simulated where the decision is made: the environment the
entrypoint builds for a host with an NVIDIA GPU (``build_environment`` with
one GPU), given to a real Python child under the start-up hook with the real
torch-xla. torch-xla 2.9 would hand that script its CPU device.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.helpers.engines import needs_torch_xla
from tests.helpers.hook import run_hooked
from tests.helpers.jobs import SCRIPTS
from trcomp.config import TrainingCompilerConfig
from trcomp_container.backends import resolve_engine
from trcomp_container.devices import Devices
from trcomp_container.environment import build_environment
from trcomp_container.job import JobPaths

pytestmark = [pytest.mark.slow, needs_torch_xla]


def gpu_host_env(tmp_path: Path, config: TrainingCompilerConfig, backend) -> dict[str, str]:
    devices = Devices(gpus=1, host_gpus=1)
    env = build_environment(
        config=config,
        backend=backend,
        engine=resolve_engine(config, backend, devices),
        devices=devices,
        paths=JobPaths.under(tmp_path / "ml"),
        base_env={},
        metrics_dir=tmp_path / "ranks",
        scratch_dir=tmp_path / "scratch",
    )
    return {"TRCOMP_CONFIG": env["TRCOMP_CONFIG"], "TRCOMP_BACKEND": env["TRCOMP_BACKEND"]}


@pytest.mark.parametrize("backend", ["inductor", None])
def test_xm_xla_device_on_a_gpu_host_stops_the_script_with_the_replacements(tmp_path, backend):
    config = TrainingCompilerConfig(enabled=backend is not None)
    code = (SCRIPTS / "native_xla.py").read_text()
    done = run_hooked(tmp_path, code, extra_env=gpu_host_env(tmp_path, config, backend), fork=True)
    assert done.returncode == 64, done.stderr[-2000:]
    assert "would train on the CPU while the GPUs sit idle" in done.stderr
    (path,) = (tmp_path / "ranks").glob("rank3-pid*.json")
    error = json.loads(path.read_text())["error"]
    assert error["type"] == "TorchXlaOnGpu"
    for old, new in [
        ("xm.xla_device()", "trcomp.runtime.device()"),
        ("xm.optimizer_step(optimizer)", "trcomp.runtime.optimizer_step(optimizer)"),
        ("xm.mark_step()", "trcomp.runtime.mark_step()"),
        ("pl.MpDeviceLoader(loader, device)", "trcomp.runtime.wrap_loader(loader)"),
    ]:
        assert f"{old} -> {new}" in error["message"]


def test_importing_torch_xla_on_a_gpu_host_is_still_allowed(tmp_path):
    # accelerate and transformers import torch-xla when it is installed.
    env = gpu_host_env(tmp_path, TrainingCompilerConfig(), "inductor")
    done = run_hooked(tmp_path, "import torch_xla; print('imported')", extra_env=env, fork=True)
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.strip().endswith("imported")


def test_on_a_cpu_host_the_old_script_still_runs_under_torch_xla(tmp_path):
    config = TrainingCompilerConfig(backend="xla")
    env = build_environment(
        config=config,
        backend="xla",
        engine=resolve_engine(config, "xla", Devices()),
        devices=Devices(),
        paths=JobPaths.under(tmp_path / "ml"),
        base_env={},
        metrics_dir=tmp_path / "ranks",
        scratch_dir=tmp_path / "scratch",
    )
    keep = ("TRCOMP_CONFIG", "TRCOMP_BACKEND", "PJRT_DEVICE", "XLA_FLAGS")
    code = "import torch_xla.core.xla_model as xm; print(xm.xla_device())"
    done = run_hooked(tmp_path, code, extra_env={k: env[k] for k in keep if k in env}, fork=True)
    assert done.returncode == 0, done.stderr[-2000:]
    assert "xla" in done.stdout
