"""Verified compile: each failure class the gate covers, caught, with the summary's reason.

In this process with real torch: dynamo's ``aot_eager`` backend (tracing and
autograd without code generation) where the pattern is torch's own bug or the
gate's logic, inductor where it is inductor's random numbers. Each script's
losses must equal the same script run eager: the step that is checked runs on
eager's result.
"""

from __future__ import annotations

import dataclasses

import pytest

from trcomp_container.inprocess import autocompile, torch_compat, verify
from trcomp_container.inprocess.unrolled import MAX_REPEATS, Census, loop_reason

torch = pytest.importorskip("torch")
nn = torch.nn


_MADE: list[autocompile.AutoCompile] = []
_TRAINED: list = []
"""The model :func:`train` trained last."""


@pytest.fixture(autouse=True)
def _fresh_dynamo():
    torch._dynamo.reset()
    yield
    while _MADE:  # every change a test's hooks made, undone (as a session closes)
        _MADE.pop()._ledger.close()
    torch._dynamo.reset()


def hooks(**kwargs) -> autocompile.AutoCompile:
    options = {
        "compile_kwargs": {"backend": "aot_eager"},
        "fallback_eager": True,
        "verify": True,
        **kwargs,
    }
    policy = autocompile.AutoCompile(torch, **options)
    policy.install()
    _MADE.append(policy)
    return policy


def train(make, steps: int = 5, policy=None, penalty: bool = False, loss_of=None) -> list[float]:
    """Per-step losses of a plain loop; ``policy`` gets the step events a session sends."""
    torch.manual_seed(0)
    model = make()
    _TRAINED[:] = [model]
    batches = [torch.randn(6, 4) for _ in range(steps)]
    try:
        return run_steps(model, batches, policy, penalty=penalty, loss_of=loss_of)
    finally:
        if policy is not None:
            policy.end_search()


def run_steps(model, batches, policy=None, *, penalty=False, loss_of=None) -> list[float]:
    """SGD steps of ``model`` on ``batches``; the loss is ``loss_of(output)`` (default: the
    output's mean square)."""
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    losses = []
    for x in batches:
        out = model(x)
        loss = out.pow(2).mean() if loss_of is None else loss_of(out)
        if penalty:  # a WGAN-GP style gradient penalty: double backward through the model
            point = x.clone().requires_grad_(True)
            (grad,) = torch.autograd.grad(model(point).sum(), point, create_graph=True)
            loss = loss + (grad.norm(dim=1) - 1).pow(2).mean()
        loss.backward()
        opt.step()
        opt.zero_grad()
        if policy is not None:
            policy.on_step()
        losses.append(float(loss))
    return losses


class Net(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.a = nn.Linear(4, 8)
        self.b = nn.Linear(8, 1)

    def forward(self, x):
        return self.b(torch.tanh(self.a(x)))


class Centered(Net):
    """DINO-style centering: reads a buffer, then updates it in place under no_grad."""

    def __init__(self) -> None:
        super().__init__()
        self.register_buffer("center", torch.zeros(8))

    def forward(self, x):
        h = torch.tanh(self.a(x))
        out = self.b(h * (h - self.center))
        with torch.no_grad():
            self.center.mul_(0.5).add_(h.mean(0), alpha=0.5)
        return out


def test_a_correct_model_is_verified_and_then_runs_compiled():
    policy = hooks()
    losses = train(Net, policy=policy)
    (entry,) = policy.compiled
    assert entry.verified is True and entry.failed is None
    assert entry.verified_calls == 1 and entry.calls == 4  # one graph, checked once
    assert entry.graphs_seen == 3  # each of its first three calls went through compiled code
    assert losses == pytest.approx(train(Net), abs=1e-5)


def test_wrong_gradients_from_a_buffer_updated_after_it_was_read_are_caught():
    eager = train(Centered)
    policy = hooks()
    losses = train(Centered, policy=policy)
    (entry,) = policy.compiled
    assert entry.verified is False and entry.failed.startswith("verification: ")
    assert "differs by" in entry.failed, entry.failed
    assert not entry.ran_compiled
    assert losses == pytest.approx(eager, abs=1e-6)


def test_a_backward_compile_error_is_caught_and_the_script_trains_on():
    from torch._dynamo.backends.common import aot_autograd

    def refuse(gm, example_inputs):
        raise RuntimeError("backward compiler refused this graph")

    backend = aot_autograd(fw_compiler=lambda gm, example_inputs: gm, bw_compiler=refuse)
    eager = train(Net)
    policy = hooks(compile_kwargs={"backend": backend})
    losses = train(Net, policy=policy)
    (entry,) = policy.compiled
    assert entry.verified is False
    assert "backward compiler refused this graph" in entry.failed
    assert losses == pytest.approx(eager, abs=1e-6)


def test_double_backward_through_the_module_gets_eagers_gradients_then_runs_eager():
    eager = train(Net, penalty=True)
    policy = hooks()
    losses = train(Net, policy=policy, penalty=True)
    (entry,) = policy.compiled
    assert entry.double_backwards >= 1 and "create_graph=True" in entry.failed
    assert losses == pytest.approx(eager, abs=1e-6)


@pytest.mark.parametrize("through", ["input", "parameters"])
def test_a_double_backward_that_starts_after_the_check_does_not_fail_the_step(through):
    """A gradient penalty from step 6 (after the check verified the module): torch's compiled
    backward cannot build its graph, so the step recomputes the module eagerly. Through the
    input (WGAN-GP: the call runs in regionfn's node) or the parameters alone (a gradient
    norm penalty: the call's compiled node gets regionfn's hook; torch's error on 7205ae0)."""
    torch.manual_seed(0)
    batches = [torch.randn(6, 4) for _ in range(8)]

    def run(policy=None):
        torch.manual_seed(0)
        model = Net()
        opt = torch.optim.SGD(model.parameters(), lr=0.1)
        losses = []
        for step, x in enumerate(batches):
            point = x.clone().requires_grad_(through == "input")
            loss = model(point).pow(2).mean()
            if step >= 5:
                wrt = [point] if through == "input" else list(model.parameters())
                grads = torch.autograd.grad(loss, wrt, create_graph=True)
                loss = loss + sum(grad.pow(2).sum() for grad in grads)
            loss.backward()
            opt.step()
            opt.zero_grad()
            if policy is not None:
                policy.on_step()
            losses.append(float(loss))
        return losses

    eager = run()
    policy = hooks()
    losses = run(policy)
    policy.end_search()
    (entry,) = policy.compiled
    assert entry.verified is True and entry.double_backwards == 1, entry.as_dict()
    assert "create_graph=True" in entry.failed
    assert losses == pytest.approx(eager, abs=1e-6)


def train_then_resize(make, policy=None) -> list[float]:
    """Five steps on batches of 6, then three on batches of 3: dynamo compiles a new graph."""
    first = train(make, steps=5, policy=policy)
    torch.manual_seed(1)
    later = run_steps(_TRAINED[-1], [torch.randn(3, 4) for _ in range(3)], policy)
    return first + later


def wrong_from_graph(first_wrong: int):
    """A dynamo backend whose graphs from the ``first_wrong``-th on scale their outputs by
    1.5 (a compiler bug)."""
    graphs = []

    def backend(gm, example_inputs):
        graphs.append(gm)
        if len(graphs) < first_wrong:
            return gm.forward

        def wrong(*args):
            out = gm(*args)
            return type(out)(o * 1.5 if o.is_floating_point() else o for o in out)

        return wrong

    return backend


def test_a_wrong_graph_compiled_after_the_check_is_caught():
    eager = train_then_resize(Net)
    policy = hooks(compile_kwargs={"backend": wrong_from_graph(2)})
    losses = train_then_resize(Net, policy=policy)
    (entry,) = policy.compiled
    assert entry.rechecks == 1 and entry.verified is False, entry.as_dict()
    assert "output 0 differs" in entry.failed, entry.failed
    assert not entry.ran_compiled
    assert losses == pytest.approx(eager, abs=1e-6)


def test_a_correct_new_graph_is_checked_and_runs_compiled():
    eager = train_then_resize(Net)
    model = _TRAINED.pop()
    policy = hooks()
    losses = train_then_resize(Net, policy=policy)
    (entry,) = policy.compiled
    assert entry.rechecks == 1 and entry.verified is True and entry.ran_compiled
    assert losses == pytest.approx(eager, abs=1e-5)
    # An evaluation afterwards (eval mode, no gradients) is a new graph too.
    x = torch.randn(5, 4)
    with torch.no_grad():
        expected = model.eval()(x)
        out = _TRAINED.pop().eval()(x)
    assert entry.rechecks == 2 and entry.verified is None and entry.checking
    assert torch.allclose(out, expected, atol=1e-5)


@dataclasses.dataclass
class Output:
    """What HF-style models return: a dataclass (here holding a dict)."""

    extras: dict


class Structured(Net):
    def forward(self, x):
        return Output({"y": super().forward(x)})


def test_a_wrong_output_inside_a_dataclass_is_caught():
    def loss_of(out):
        return out.extras["y"].pow(2).mean()

    eager = train(Structured, steps=4, loss_of=loss_of)
    policy = hooks(compile_kwargs={"backend": wrong_from_graph(1)})
    losses = train(Structured, steps=4, policy=policy, loss_of=loss_of)
    (entry,) = policy.compiled
    assert entry.verified is False and "output 0 differs" in entry.failed, entry.failed
    assert losses == pytest.approx(eager, abs=1e-6)


class Unrolled(Net):
    """A Python loop over one submodule, one call per step of a sequence (an RNN cell)."""

    def forward(self, x):
        h = torch.tanh(self.a(x))
        for _ in range(MAX_REPEATS + 1):
            h = torch.tanh(h + self.a(x) * 0.1)
        return self.b(h)


def test_a_loop_that_would_unroll_into_one_huge_graph_is_never_compiled():
    eager = train(Unrolled)
    graphs = torch_compat.unique_graphs()
    policy = hooks()
    losses = train(Unrolled, policy=policy)
    (entry,) = policy.compiled
    assert entry.verified is False and not entry.ran_compiled
    assert f"calls a (Linear) {MAX_REPEATS + 2} times in one call" in entry.failed, entry.failed
    assert torch_compat.unique_graphs() == graphs  # seen before dynamo traced anything
    assert losses == pytest.approx(eager, abs=1e-6)
    # A forward that calls it fewer times is compiled as before.
    census = Census()
    net = Net()
    for _ in range(MAX_REPEATS):
        census.count(net.a)
    assert loop_reason(net, census) is None
    census.count(net.a)
    assert "calls a (Linear) 65 times" in (loop_reason(net, census) or "")


@pytest.mark.slow
def test_inductors_own_random_numbers_are_caught_and_fallback_random_passes():
    class Dropped(Net):
        def forward(self, x):
            return self.b(nn.functional.dropout(torch.tanh(self.a(x)), 0.3, self.training))

    config = torch._inductor.config
    results = {}
    for fallback in (False, True):
        torch._dynamo.reset()
        with config.patch(fallback_random=fallback):
            policy = hooks(compile_kwargs={"backend": "inductor"})
            losses = train(Dropped, steps=3, policy=policy)
        results[fallback] = (policy.compiled[0], losses)
    eager = train(Dropped, steps=3)
    assert "random numbers differently" in (results[False][0].failed or "")
    assert results[True][0].verified is True
    for _, losses in results.values():
        assert losses == pytest.approx(eager, abs=1e-5)
    # fast_random=True: inductor's own numbers are the user's choice; the check shows it runs.
    torch._dynamo.reset()
    with config.patch(fallback_random=False):
        policy = hooks(compile_kwargs={"backend": "inductor"}, compare_random=False)
        train(Dropped, steps=4, policy=policy)
    assert policy.compiled[0].verified is True and policy.compiled[0].ran_compiled


def test_a_loop_without_an_optimizer_is_not_checked_forever():
    policy = hooks()
    torch.manual_seed(0)
    model = Net()
    try:
        for _ in range(autocompile.MAX_CHECKED_CALLS + 3):
            model(torch.randn(2, 4)).sum().backward()
            with torch.no_grad():
                for param in model.parameters():
                    param -= 0.01 * param.grad
                    param.grad = None
    finally:
        policy.end_search()
    (entry,) = policy.compiled
    assert entry.verified is True and entry.verified_calls == 1  # one graph
    assert entry.calls == autocompile.MAX_CHECKED_CALLS + 2  # the first call ran eager


class DryRun(nn.Module):
    """Sizes its head by calling its feature extractor once in ``__init__``."""

    def __init__(self) -> None:
        super().__init__()
        self.features = nn.Sequential(nn.Linear(4, 8), nn.Tanh())
        width = self.features(torch.zeros(1, 4)).shape[1]
        self.head = nn.Linear(width, 1)

    def forward(self, x):
        return self.head(self.features(x))


def test_the_trained_model_is_compiled_when_a_part_was_called_first():
    policy = hooks()
    losses = train(DryRun, policy=policy)
    assert [entry.name for entry in policy.compiled] == ["DryRun"]
    assert policy.superseded == ["Sequential"] and policy.script_compiled == []
    assert policy.compiled[0].ran_compiled and policy.compiled[0].verified is True
    assert losses == pytest.approx(train(DryRun), abs=1e-5)


@pytest.fixture
def runtime_compile(monkeypatch):
    """``trcomp.runtime.compile`` as in a job under inductor, compiling with ``aot_eager``."""
    import json

    from trcomp import runtime

    monkeypatch.setenv("TRCOMP_CONFIG", json.dumps({"enabled": True, "backend": "inductor"}))
    monkeypatch.setattr(runtime, "compile_kwargs", lambda config: {"backend": "aot_eager"})
    runtime._config_from.cache_clear()
    yield runtime.compile
    runtime._config_from.cache_clear()


def test_a_model_compiled_through_trcomp_runtime_is_checked_too(runtime_compile):
    from trcomp import runtime

    eager = train(Centered)
    policy = hooks()
    wrong = train(lambda: runtime_compile(Centered()), policy=policy)
    torch._dynamo.reset()
    right = train(lambda: runtime_compile(Net()), policy=policy)
    assert runtime._watchers == [policy.adopt]  # until the session closes
    policy._ledger.close()
    assert not runtime._watchers
    bad, good = policy.compiled
    assert (bad.name, bad.by, policy.script_compiled) == ("Centered", "trcomp.runtime.compile", [])
    assert bad.verified is False and "differs by" in bad.failed and not bad.ran_compiled
    assert wrong == pytest.approx(eager, abs=1e-6)
    assert good.verified is True and good.ran_compiled and good.verified_calls == 1
    assert right == pytest.approx(train(Net), abs=1e-5)


def test_a_copy_for_the_compiled_graph_keeps_the_strides_it_asserts():
    """Inductor pads its outputs' rows on GPUs (GPT-2's logits: 50,257 wide, rows of
    50,264); the next graph is compiled for those strides and asserts them, so the check's
    copies and the protected inputs keep them (``clone()`` made them contiguous: the H200
    run of GPT-2 under the hook failed so, docs/benchmarks.md)."""
    padded = torch.randn(4, 3, 72)[:, :, :67]  # rows of 72, 67 used
    assert not padded.is_contiguous()
    copied = verify.strided_copy(torch, padded)
    assert copied.stride() == padded.stride() and torch.equal(copied, padded)
    assert copied.data_ptr() != padded.data_ptr()
    assert padded.clone().stride() != padded.stride()  # what the copy was before
