"""One config, one behaviour: runtime.compile and an HF script compile with the same settings.

``inductor_options`` are applied once, globally, by the start-up hook; ``mode``
is passed to torch.compile as ``mode`` by runtime.compile and by Accelerate
alike. These tests run the real hook, real Accelerate and the real torch.compile
on CPU, and read what torch.compile was given and the inductor config that was in
effect while each graph compiled.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from tests.helpers import forkserver
from trcomp.contract.config import TrainingCompilerConfig
from trcomp.contract.runtime_config import RuntimeConfig
from trcomp.runtime import compile_kwargs
from trcomp_container.backends import inductor
from trcomp_container.devices import Devices
from trcomp_container.environment import HOOK_DIR, build_environment
from trcomp_container.job import JobPaths

# The developer's variables that a job's environment would not have.
_JOB_PREFIXES = ("TRCOMP_", "SM_", "ACCELERATE_", "TORCHINDUCTOR_", "PJRT_", "USE_TORCH_XLA")


def test_only_changed_fields_are_passed() -> None:
    assert compile_kwargs({"mode": "default"}) == {"backend": "inductor"}
    assert compile_kwargs({"mode": "max-autotune", "fullgraph": True, "dynamic": False}) == {
        "backend": "inductor",
        "mode": "max-autotune",
        "fullgraph": True,
        "dynamic": False,
    }


def test_mode_stays_mode_and_options_are_left_to_the_hook() -> None:
    config = RuntimeConfig(mode="reduce-overhead", inductor_options={"epilogue_fusion": False})
    assert compile_kwargs(config) == {"backend": "inductor", "mode": "reduce-overhead"}


# Records the inductor settings in effect while each graph compiles (post-grad pass).
PROBE = """
import json, torch
import torch._inductor.config as inductor_config
from torch._inductor.custom_graph_pass import CustomGraphPass
from trcomp import runtime

KEYS = ("epilogue_fusion", "triton.cudagraphs", "max_autotune")
seen = []

class Record(CustomGraphPass):
    def __call__(self, graph):
        config = inductor_config.get_config_copy()
        seen.append({key: config[key] for key in KEYS})

    def uuid(self):
        return None

inductor_config.post_grad_custom_pre_pass = Record()
x = torch.randn(4, 8)
with torch.no_grad():
    runtime.compile(torch.nn.Linear(8, 8))(x)  # a trcomp.runtime script
    torch._dynamo.reset()
    # an HF script: Accelerate compiles from the job's ACCELERATE_DYNAMO_* variables
    from accelerate import Accelerator
    Accelerator().prepare(torch.nn.Linear(8, 8))(x)
print(json.dumps(seen))
"""


@pytest.mark.slow
def test_runtime_compile_and_an_hf_script_see_the_same_inductor_config(tmp_path: Path) -> None:
    # triton.cudagraphs contradicts the mode: both kinds of script must settle it alike.
    options = {"epilogue_fusion": False, "triton.cudagraphs": False}
    config = TrainingCompilerConfig(
        backend="inductor", mode="reduce-overhead", inductor_options=options
    )
    env = {k: v for k, v in os.environ.items() if not k.startswith("TRCOMP_")}
    env.update(inductor.environment(config))  # TRCOMP_INDUCTOR_OPTIONS, as the container sets it
    env.update(RuntimeConfig.resolved(config, backend="inductor", engine="inductor").to_env())
    env.update(
        PYTHONPATH=str(HOOK_DIR),
        TRCOMP_METRICS_DIR=str(tmp_path / "ranks"),
        TORCHINDUCTOR_FX_GRAPH_CACHE="0",
        TORCHINDUCTOR_CACHE_DIR=str(tmp_path / "inductor"),
    )
    # Its own interpreter: the only child with TORCHINDUCTOR_FX_GRAPH_CACHE=0, which would
    # take a zygote of its own (tests/helpers/forkserver.py MAX_ZYGOTES) for one run.
    done = subprocess.run(
        [sys.executable, "-c", PROBE], env=env, capture_output=True, text=True, timeout=300
    )
    assert done.returncode == 0, done.stderr[-3000:]
    runtime_script, hf_script = json.loads(done.stdout.strip().splitlines()[-1])
    assert runtime_script == hf_script
    # the user's option, applied by the hook; where the mode sets one too, the mode's holds
    assert runtime_script["epilogue_fusion"] is False
    assert runtime_script["triton.cudagraphs"] is True
    assert runtime_script["max_autotune"] is False


# A real Accelerate script's start: Accelerator().prepare(model), as the HF Trainer does.
# torch.compile is wrapped only to record what Accelerate passes; the real one runs.
ACCELERATE_SCRIPT = """
import json, torch
import torch._inductor.config as inductor_config
received = []
real_compile = torch.compile

def recording_compile(*args, **kwargs):
    received.append(kwargs)
    return real_compile(*args, **kwargs)

torch.compile = recording_compile
from accelerate import Accelerator
model = Accelerator().prepare(torch.nn.Linear(8, 8))
print(json.dumps({
    "kwargs": received,
    "type": type(model).__name__,
    "epilogue_fusion": inductor_config.epilogue_fusion,
}))
"""


def _run_script(script: str, env: dict[str, str]) -> dict[str, Any]:
    """Run ``script`` with ``env`` (forked as a job's script is: tests/helpers/forkserver.py);
    the JSON it printed last."""
    done = forkserver.run_python(["-c", script], env, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    result: dict[str, Any] = json.loads(done.stdout.strip().splitlines()[-1])
    return result


def _job_env(tmp_path: Path, config: TrainingCompilerConfig) -> dict[str, str]:
    """The environment the container gives an inductor job's script."""
    base = {k: v for k, v in os.environ.items() if not k.startswith(_JOB_PREFIXES)}
    return build_environment(
        config=config,
        backend="inductor",
        engine="inductor",
        devices=Devices(),
        paths=JobPaths.under(tmp_path / "opt-ml"),
        base_env=base,
        metrics_dir=tmp_path / "ranks",
        scratch_dir=tmp_path / "scratch",
    )


@pytest.mark.slow
@pytest.mark.parametrize(
    ("fields", "expected"),
    [
        ({}, {}),
        ({"mode": "max-autotune", "fullgraph": True}, {"mode": "max-autotune", "fullgraph": True}),
        ({"dynamic": False}, {"dynamic": False}),
        ({"dynamic": True, "inductor_options": {"epilogue_fusion": False}}, {"dynamic": True}),
    ],
    ids=["defaults", "mode-fullgraph", "static", "dynamic-options"],
)
def test_accelerate_compiles_with_the_jobs_settings(
    tmp_path: Path, fields: dict[str, Any], expected: dict[str, Any]
) -> None:
    config = TrainingCompilerConfig(backend="inductor", **fields)
    seen = _run_script(ACCELERATE_SCRIPT, _job_env(tmp_path, config))
    # Exactly one compile, of the whole model, with only what the config changed.
    assert seen["kwargs"] == [{"backend": "inductor", **expected}]
    assert seen["type"] == "OptimizedModule"
    # inductor_options reach the compiler through the hook, not torch.compile's options=.
    assert seen["epilogue_fusion"] is (config.inductor_options.get("epilogue_fusion", True))


# Accelerator().prepare on a GPT-2 built from a config: which modules Accelerate compiled.
ACCELERATE_GPT2_SCRIPT = """
import json, torch
from transformers import GPT2Config, GPT2LMHeadModel
from accelerate import Accelerator
config = GPT2Config(n_layer=3, n_embd=16, n_head=2, n_positions=16, vocab_size=32,
                    bos_token_id=31, eos_token_id=31)
model = Accelerator().prepare(GPT2LMHeadModel(config))
compiled = torch._dynamo.eval_frame.OptimizedModule
print(json.dumps({
    "type": type(model).__name__,
    "blocks": [type(block).__name__ for block in model.transformer.h],
    "inner": [type(block._orig_mod).__name__ for block in model.transformer.h
              if isinstance(block, compiled)],
}))
"""


@pytest.mark.slow
@pytest.mark.parametrize("regional", [True, None])
def test_accelerate_compiles_the_repeated_blocks_when_regional_is_true(
    tmp_path: Path, regional: bool | None
) -> None:
    config = TrainingCompilerConfig(backend="inductor", regional=regional)
    env = _job_env(tmp_path, config)
    assert ("ACCELERATE_DYNAMO_USE_REGIONAL_COMPILATION" in env) is (regional is True)
    seen = _run_script(ACCELERATE_GPT2_SCRIPT, env)
    if regional:
        # Accelerate's compile_regions: the model keeps its class, each block is compiled.
        assert seen["type"] == "GPT2LMHeadModel"
        assert seen["blocks"] == ["OptimizedModule"] * 3 and seen["inner"] == ["GPT2Block"] * 3
    else:
        assert seen["type"] == "OptimizedModule" and seen["blocks"] == ["GPT2Block"] * 3
