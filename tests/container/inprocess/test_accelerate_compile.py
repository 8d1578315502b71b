"""The compile trcomp turns on through Accelerate is checked and filed as trcomp's own.

For inductor jobs the entrypoint exports ``ACCELERATE_DYNAMO_BACKEND=INDUCTOR``, so
Accelerate (HF Trainer) compiles the model in ``Accelerator.prepare``. Here the real
Accelerate prepares a model under the hook (in-process, as the start-up hook runs it;
dynamo's ``aot_eager`` for the check): the hook takes that compile over through its
checked backend, files it "trcomp, through Accelerate", and the losses are eager's. On
7205ae0 the same model was filed "by the script" and never checked. A script's own
``torch.compile`` stays the script's.
"""

from __future__ import annotations

from typing import Any

import pytest

from trcomp_container.inprocess import autocompile
from trcomp_container.inprocess.accelerate_compile import BY_ACCELERATE

torch = pytest.importorskip("torch")
accelerate = pytest.importorskip("accelerate")
nn = torch.nn


@pytest.fixture(autouse=True)
def _environment(monkeypatch):
    # As the entrypoint's USE_TORCH_XLA=0 does before Accelerate is imported: no XLA device
    # (Accelerate reads it once, at import, and this worker imported it already).
    from accelerate.state import AcceleratorState
    from accelerate.utils import imports

    monkeypatch.setattr(imports, "_torch_xla_available", False)
    imports.is_torch_xla_available.cache_clear()
    AcceleratorState._reset_state(reset_partial_state=True)  # it keeps the first dynamo plugin
    torch._dynamo.reset()
    yield
    AcceleratorState._reset_state(reset_partial_state=True)
    imports.is_torch_xla_available.cache_clear()
    torch._dynamo.reset()


class Blocks(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.blocks = nn.ModuleList(nn.Sequential(nn.Linear(8, 8), nn.Tanh()) for _ in range(3))
        self.head = nn.Linear(8, 1)

    def forward(self, x):
        for block in self.blocks:
            x = block(x)
        return self.head(x)


def train(hooked: bool, *, own_compile: bool = False) -> dict[str, Any]:
    from accelerate.state import AcceleratorState

    AcceleratorState._reset_state(reset_partial_state=True)  # a new job: its own plugin
    torch.manual_seed(0)
    policy = None
    if hooked:
        policy = autocompile.AutoCompile(
            torch, compile_kwargs={"backend": "aot_eager"}, fallback_eager=True, verify=True
        )
        policy.install()
    try:
        model = Blocks()
        if own_compile:  # the script's own compile, not Accelerate's
            model = torch.compile(model, backend="aot_eager")
        opt = torch.optim.SGD(model.parameters(), lr=0.05)
        accelerator = accelerate.Accelerator(cpu=True)
        prepared, opt = accelerator.prepare(model, opt)
        losses = []
        for _ in range(8):
            loss = prepared(torch.randn(4, 8)).pow(2).mean()
            accelerator.backward(loss)
            opt.step()
            opt.zero_grad()
            if policy is not None:
                policy.on_step()
            losses.append(float(loss))
        return {"losses": losses, "policy": policy, "prepared": prepared}
    finally:
        if policy is not None:
            policy._ledger.close()


def test_accelerates_compile_is_checked_and_filed_as_trcomps(monkeypatch):
    eager = train(hooked=False)["losses"]  # no ACCELERATE_DYNAMO_BACKEND: nothing compiled
    monkeypatch.setenv("ACCELERATE_DYNAMO_BACKEND", "INDUCTOR")
    original = torch.compile
    run = train(hooked=True)
    assert torch.compile is original  # the wrapper is gone with the hook
    policy = run["policy"]
    assert type(run["prepared"]).__name__ == "OptimizedModule"  # Accelerate's, as before
    assert policy.error is None and policy.script_compiled == []
    (entry,) = policy.compiled
    assert entry.by == BY_ACCELERATE
    assert entry.verified is True and entry.verified_calls >= 1, entry.as_dict()
    assert entry.state.runs_compiled
    assert run["losses"] == pytest.approx(eager, abs=1e-6)


def test_regional_compilation_checks_each_block_accelerate_compiled(monkeypatch):
    eager = train(hooked=False)["losses"]
    monkeypatch.setenv("ACCELERATE_DYNAMO_BACKEND", "INDUCTOR")
    monkeypatch.setenv("ACCELERATE_DYNAMO_USE_REGIONAL_COMPILATION", "True")
    run = train(hooked=True)
    entries = run["policy"].compiled
    assert len(entries) >= 3 and all(e.by == BY_ACCELERATE for e in entries)
    assert all(e.verified for e in entries), [e.as_dict() for e in entries]
    assert run["losses"] == pytest.approx(eager, abs=1e-6)


def test_the_scripts_own_compile_stays_the_scripts(monkeypatch):
    monkeypatch.setenv("ACCELERATE_DYNAMO_BACKEND", "INDUCTOR")
    run = train(hooked=True, own_compile=True)
    policy = run["policy"]
    assert not any(e.by == BY_ACCELERATE for e in policy.compiled)
    assert policy.script_compiled == ["Blocks"]


def test_a_compile_trcomp_did_not_ask_accelerate_for_is_left_alone(monkeypatch):
    monkeypatch.setenv("ACCELERATE_DYNAMO_BACKEND", "AOT_EAGER")  # the script's choice
    run = train(hooked=True)
    assert not any(e.by == BY_ACCELERATE for e in run["policy"].compiled)
    assert run["policy"].script_compiled == ["Blocks"]
