"""Loops that step no torch.optim optimizer (issue 41): the step is found from backward passes,
so the job measures compiled against eager and can undo; where no step is found, the
summary says what the compile cost and why it was kept.

A real session in this process (its record written at close), real torch, dynamo's
``aot_eager`` backend; assertions on counters and states, never on wall times.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from trcomp.contract.runtime_config import RuntimeConfig
from trcomp_container.inprocess import record as rank_record
from trcomp_container.inprocess.backward_steps import BACKWARDS_BEFORE_STEPS, WATCH
from trcomp_container.inprocess.session import Session
from trcomp_container.inprocess.settings import Settings
from trcomp_container.inprocess.state import ModuleState
from trcomp_container.summary import build_summary, render_block

torch = pytest.importorskip("torch")
nn = torch.nn


class Net(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.a = nn.Linear(4, 8)
        self.b = nn.Linear(8, 1)

    def forward(self, x):
        return self.b(torch.tanh(self.a(x)))


@pytest.fixture
def session(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    """A job's session under inductor's config, compiling with ``aot_eager``."""
    monkeypatch.setattr(RuntimeConfig, "compile_kwargs", lambda self: {"backend": "aot_eager"})
    config = json.dumps({"enabled": True, "backend": "inductor", "engine": "inductor"})
    settings = Settings.from_env({"TRCOMP_METRICS_DIR": str(tmp_path), "TRCOMP_CONFIG": config})
    torch._dynamo.reset()
    made = Session(settings)
    made.start()  # torch and dynamo are imported already: start() runs their callbacks
    yield made
    made.close()
    torch.compiler.set_stance("default")
    torch._dynamo.reset()


def by_hand(model: Net, steps: int, *, grad: bool = False) -> list[float]:
    """SGD by hand, as pytorch/examples' regression: ``p -= lr * p.grad``, no optimizer.
    ``grad``: gradients from ``torch.autograd.grad`` (nothing accumulates)."""
    torch.manual_seed(1)
    batches = [torch.randn(6, 4) for _ in range(steps)]
    losses = []
    for x in batches:
        loss = model(x).pow(2).mean()
        params = list(model.parameters())
        grads = torch.autograd.grad(loss, params) if grad else None
        if not grad:
            loss.backward()
        with torch.no_grad():
            for index, param in enumerate(params):
                param -= 0.1 * (grads[index] if grads else param.grad)
                param.grad = None
        losses.append(float(loss))
    return losses


def record_of(session: Session, tmp_path: Path) -> rank_record.RankRecord:
    session.close()
    (path,) = tmp_path.glob(rank_record.RECORD_GLOB)
    return rank_record.read(path)


def test_a_loop_without_an_optimizer_is_measured_on_its_backward_passes(session, tmp_path):
    torch.manual_seed(0)
    eager = by_hand(Net(), 40)
    torch.manual_seed(0)
    model = Net()
    losses = by_hand(model, 40)
    assert losses == pytest.approx(eager, abs=1e-5)  # the check and the eager window included
    watched = next(model.parameters())
    assert session.module_states() == [("Net", ModuleState.COMPILED_VERIFIED)]
    assert WATCH in session.ledger.in_force()
    record = record_of(session, tmp_path)
    assert not watched._post_accumulate_grad_hooks  # the hook is gone once the job ends
    assert record.steps == 40 - BACKWARDS_BEFORE_STEPS
    speedup = record.speedup
    assert speedup is not None and speedup.steps_from == "backward"
    assert speedup.decision is not None and speedup.decision.source == "measured"
    assert speedup.eager_steps == [8, 9, 10, 11]
    summary = build_summary([record], job={"backend": "inductor"})
    assert summary["speedup"]["speedup_vs_eager"] is not None
    assert "steps: backward passes" in render_block(summary)


def test_a_loop_that_steps_an_optimizer_counts_its_steps_and_drops_the_hook(session, tmp_path):
    torch.manual_seed(0)
    model = Net()
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    for step in range(12):
        model(torch.randn(6, 4)).pow(2).mean().backward()
        if step % 2:  # gradient accumulation over two batches
            opt.step()
            opt.zero_grad()
    assert WATCH not in session.ledger.in_force()
    record = record_of(session, tmp_path)
    assert record.steps == 6 and record.speedup.steps_from == "optimizer"


def test_a_loop_whose_step_is_not_found_says_what_the_compile_cost(session, tmp_path):
    # Gradients from torch.autograd.grad: nothing accumulates, no backward pass is seen.
    by_hand(Net(), 12, grad=True)
    record = record_of(session, tmp_path)
    assert record.steps == 0 and record.speedup.decision is None
    summary = build_summary([record], job={"backend": "inductor"})
    reason = summary["speedup"]["reason"]
    assert "stepped no torch.optim optimizer, and no step of its loop was found" in reason
    assert "compiling cost" in reason and "kept unmeasured" in reason
