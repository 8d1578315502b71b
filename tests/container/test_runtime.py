"""trcomp.runtime: eager outside a job, compiled inside one; torch stays lazy."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from trcomp import runtime
from trcomp.contract.runtime_config import RuntimeConfig
from trcomp.runtime import regions


@pytest.fixture
def config_env(monkeypatch):
    def set_config(**body):
        monkeypatch.setenv("TRCOMP_CONFIG", json.dumps(body))
        runtime._config_from.cache_clear()

    yield set_config
    monkeypatch.delenv("TRCOMP_CONFIG", raising=False)
    runtime._config_from.cache_clear()


def test_importing_trcomp_and_runtime_does_not_import_torch():
    code = "import sys, trcomp, trcomp.runtime; print('torch' in sys.modules)"
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert done.stdout.strip() == "False"


def test_outside_a_job_everything_is_eager(monkeypatch, tmp_path):
    import torch

    monkeypatch.delenv("TRCOMP_CONFIG", raising=False)
    runtime._config_from.cache_clear()
    assert runtime.backend() is None and not runtime.is_enabled()
    assert runtime.device() == torch.device("cpu")
    model = torch.nn.Linear(2, 2)
    assert runtime.compile(model) is model
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    model(torch.ones(1, 2)).sum().backward()
    before = model.weight.detach().clone()
    runtime.optimizer_step(optimizer)
    assert not torch.equal(before, model.weight)
    runtime.mark_step()
    batches = list(runtime.wrap_loader([(torch.ones(1), {"y": torch.zeros(1)})]))
    assert batches[0][1]["y"].device.type == "cpu"
    runtime.save({"w": model.weight}, tmp_path / "deep" / "m.pt")
    assert torch.load(tmp_path / "deep" / "m.pt")["w"].shape == (2, 2)


def test_inductor_config_compiles_with_only_changed_options(config_env):
    import torch

    config_env(enabled=True, backend="inductor", mode="default", fullgraph=True, dynamic=None)
    compiled = runtime.compile(torch.nn.Linear(2, 2))
    assert type(compiled).__name__ == "OptimizedModule"
    assert runtime.is_enabled()


def test_disabled_config_is_eager(config_env):
    config_env(enabled=False, backend=None)
    assert runtime.backend() is None


def test_only_rank_zero_saves(config_env, monkeypatch, tmp_path):
    config_env(enabled=False, backend=None)
    monkeypatch.setenv("RANK", "1")
    runtime.save({"a": 1}, tmp_path / "x.pt")
    assert not (tmp_path / "x.pt").exists()


def test_the_config_is_read_once_per_value_of_the_variable(monkeypatch):
    monkeypatch.setenv("TRCOMP_CONFIG", json.dumps({"enabled": True, "backend": "inductor"}))
    first = runtime.resolved_config()
    assert runtime.resolved_config() is first  # unchanged: the parsed config is reused
    assert first.backend == "inductor"
    monkeypatch.setenv("TRCOMP_CONFIG", json.dumps({"enabled": False, "backend": None}))
    assert runtime.resolved_config().backend is None  # changed: read again, no cache_clear
    monkeypatch.delenv("TRCOMP_CONFIG")
    assert runtime.resolved_config() == RuntimeConfig()


def test_bad_trcomp_config_says_what_to_do(config_env, monkeypatch):
    monkeypatch.setenv("TRCOMP_CONFIG", "{oops")
    runtime._config_from.cache_clear()
    with pytest.raises(ValueError, match="TRCOMP_CONFIG"):
        runtime.backend()


def test_compile_step_is_torch_compile_under_inductor_and_the_function_otherwise(config_env):
    import torch

    def step(x):
        return (x * 2).sum()

    config_env(enabled=True, backend="inductor", mode="default", fullgraph=True, dynamic=False)
    compiled = runtime.compile_step(step)
    assert compiled is not step and getattr(compiled, "_torchdynamo_orig_callable", None) is step
    assert runtime.engine() == "inductor"
    config_env(enabled=False, backend=None)
    assert runtime.compile_step(step) is step and runtime.engine() is None
    config_env(enabled=True, backend="xla", engine="torch_xla")
    assert runtime.compile_step(step) is step and runtime.engine() == "torch_xla"
    assert float(step(torch.ones(2))) == 4.0


@pytest.mark.parametrize("regional", [True, None, False])
def test_compile_marks_repeated_blocks_only_when_regional_is_true(config_env, regional):
    import torch

    config_env(enabled=True, backend="inductor", regional=regional)
    layer = torch.nn.TransformerEncoderLayer(8, 2, 16, dropout=0.0, batch_first=True)
    model = torch.nn.TransformerEncoder(layer, 3, enable_nested_tensor=False)
    compiled = runtime.compile(model)
    marked = ["forward" in vars(block) for block in model.layers]
    assert type(compiled).__name__ == "OptimizedModule" and compiled._orig_mod is model
    if regional and regions.torch_reason(torch, {}) is None:
        assert marked == [True] * 3
        assert compiled.forward.describe() == "3 x TransformerEncoderLayer"
    else:
        assert marked == [False] * 3
