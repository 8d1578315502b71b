"""The check leaves no trace: scripts with state train under the hook as they do eager.

Each script below keeps state the check could disturb if it ran the script's code
twice: Python counters, in-place changes to its inputs, its own random generators
(Python's, numpy's, a ``torch.Generator``), gradient hooks that draw noise, plain
tensor attributes, a momentum encoder, forward hooks, a list argument, a second
backward with ``retain_graph=True``. Each runs with the hook (dynamo's
``aot_eager``: tracing and autograd without code generation, so the compiled side
computes what eager does) and without it; every step's loss, the model's state,
the script's counters and every random generator's state at the end must be the
same, and the module must have been checked and then run compiled.
"""

from __future__ import annotations

import random
from collections.abc import Callable
from typing import Any

import pytest

from trcomp_container.inprocess import autocompile

torch = pytest.importorskip("torch")
np = pytest.importorskip("numpy")
nn = torch.nn

STEPS = 12


@pytest.fixture(autouse=True)
def _fresh_dynamo():
    torch._dynamo.reset()
    yield
    torch._dynamo.reset()


def _states() -> tuple[Any, ...]:
    return (torch.random.get_rng_state(), random.getstate(), np.random.get_state()[1].copy())


def _seed() -> None:
    torch.manual_seed(0)
    random.seed(0)
    np.random.seed(0)


def run(script: Callable[[Any], Any], hooked: bool, verify: bool = True) -> dict[str, Any]:
    """Run ``script(on_step)``; returns its result, the random states after, and the hook
    (``verify=False``: the hook compiles, nothing is checked)."""
    _seed()
    policy = None
    if hooked:
        policy = autocompile.AutoCompile(
            torch, compile_kwargs={"backend": "aot_eager"}, fallback_eager=True, verify=verify
        )
        policy.install()
    try:
        result = script(policy.on_step if policy is not None else lambda: None)
    finally:
        if policy is not None:
            policy._ledger.close()
    return {"result": result, "states": _states(), "policy": policy}


def assert_invisible(
    script: Callable[[Any], Any], *, against_unchecked: bool = False, ran: bool = True
) -> Any:
    """``against_unchecked``: compared with the hook compiling unchecked instead of eager
    (where compiling differs from eager by itself); ``ran``: the module ran compiled at
    the end."""
    eager = run(script, hooked=against_unchecked, verify=False)
    hooked = run(script, hooked=True)
    for name, one, other in zip(
        ("losses", "extra"), eager["result"], hooked["result"], strict=True
    ):
        assert one == pytest.approx(other, abs=1e-6, rel=1e-6), name
    assert torch.equal(eager["states"][0], hooked["states"][0]), "torch's random state differs"
    assert eager["states"][1] == hooked["states"][1], "Python's random state differs"
    assert (eager["states"][2] == hooked["states"][2]).all(), "numpy's random state differs"
    entries = hooked["policy"].compiled
    assert entries and all(e.verified is True for e in entries), [e.as_dict() for e in entries]
    assert all(e.failed is None for e in entries), [e.failed for e in entries]
    assert not ran or all(e.ran_compiled for e in entries), [e.as_dict() for e in entries]
    return hooked["policy"]


def loop(model: nn.Module, on_step: Any, loss_of: Callable[..., Any] | None = None) -> list[float]:
    opt = torch.optim.SGD(model.parameters(), lr=0.05)
    losses = []
    for step in range(STEPS):
        x = torch.randn(6, 4)
        out = model(x)
        loss = out.pow(2).mean() if loss_of is None else loss_of(out, step)
        opt.zero_grad()
        loss.backward()
        opt.step()
        on_step()
        losses.append(float(loss))
    return losses


class Net(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.a = nn.Linear(4, 8)
        self.b = nn.Linear(8, 1)

    def forward(self, x):
        return self.b(torch.tanh(self.a(x)))


class WithLoss(Net):
    """Returns its loss, as a transformers model given labels does."""

    def forward(self, x):
        return super().forward(x).pow(2).mean()


class Counted(Net):
    """A Python counter that drives a warm-up schedule."""

    def __init__(self) -> None:
        super().__init__()
        self.calls = 0

    def forward(self, x):
        self.calls += 1
        return super().forward(x) * min(1.0, self.calls / 4)


class TensorClock(Net):
    """A step count kept as a plain tensor attribute; behaviour switches at step 9."""

    def __init__(self) -> None:
        super().__init__()
        self.t = torch.zeros(())

    def forward(self, x):
        self.t += 1
        out = super().forward(x)
        return out * 2 if bool(self.t > 8) else out


class NormalisesInPlace(Net):
    def forward(self, x):
        x.sub_(x.mean()).div_(x.std() + 1e-6)
        return super().forward(x)


class LayerDrop(Net):
    """Python's and numpy's random numbers drawn in forward (LayerDrop, noise)."""

    def forward(self, x):
        h = torch.tanh(self.a(x))
        if random.random() < 0.5:
            h = h * 0.5
        return self.b(h) + float(np.random.rand())


class OwnGenerator(Net):
    def __init__(self) -> None:
        super().__init__()
        self.generator = torch.Generator().manual_seed(7)

    def forward(self, x):
        noise = torch.randn(x.shape, generator=self.generator)
        return super().forward(x + 0.1 * noise)


class RunningStats(Net):
    """Running statistics in a plain tensor attribute, updated in forward."""

    def __init__(self) -> None:
        super().__init__()
        self.mean = torch.zeros(4)

    def forward(self, x):
        with torch.no_grad():
            self.mean.mul_(0.9).add_(x.mean(0), alpha=0.1)
        return super().forward(x - self.mean)


class Momentum(nn.Module):
    """MoCo: a key encoder updated from the query encoder in forward, and a queue."""

    def __init__(self) -> None:
        super().__init__()
        self.query = nn.Linear(4, 8)
        self.key = nn.Linear(4, 8)
        self.key.requires_grad_(False)
        self.register_buffer("queue", torch.randn(16, 8))

    def forward(self, x):
        with torch.no_grad():
            for k, q in zip(self.key.parameters(), self.query.parameters(), strict=True):
                k.mul_(0.9).add_(q, alpha=0.1)
            keys = self.key(x)
        q = self.query(x)
        logits = q @ torch.cat([keys, self.queue[: x.shape[0]]]).t()
        with torch.no_grad():
            self.queue.copy_(torch.roll(self.queue, x.shape[0], 0))
            self.queue[: x.shape[0]] = keys
        return logits


def test_a_python_counter_on_the_module_counts_each_call_once():
    def script(on_step):
        model = Counted()
        return loop(model, on_step), [model.calls]

    # dynamo specialises on the counter's value: a graph per value until its recompile
    # limit, then eager (as under a plain torch.compile); each new graph was checked.
    assert_invisible(script, ran=False)


def test_a_tensor_attribute_step_count_switches_behaviour_at_the_same_step():
    def script(on_step):
        model = TensorClock()
        return loop(model, on_step), [float(model.t)]

    assert_invisible(script)


def test_an_input_normalised_in_place_is_normalised_once():
    def script(on_step):
        model = NormalisesInPlace()
        opt = torch.optim.SGD(model.parameters(), lr=0.05)
        losses, seen = [], []
        for _ in range(STEPS):
            x = torch.randn(6, 4) * 3 + 1
            loss = model(x).pow(2).mean()
            seen.append(float(x.abs().sum()))  # the script reads its batch afterwards
            opt.zero_grad()
            loss.backward()
            opt.step()
            on_step()
            losses.append(float(loss))
        return losses, seen

    assert_invisible(script)


@pytest.mark.parametrize("make", [LayerDrop, OwnGenerator], ids=["python-numpy", "generator"])
def test_the_scripts_own_random_numbers_are_drawn_once(make):
    def script(on_step):
        model = make()
        extra = [float(torch.randn(()))]  # torch's generator after training, too
        return loop(model, on_step), extra

    assert_invisible(script)


def test_a_gradient_hook_that_draws_noise_runs_once_per_backward():
    def script(on_step):
        model = Net()
        calls = []
        for param in model.parameters():
            param.register_hook(lambda g: calls.append(1) or g + 0.01 * torch.randn_like(g))
        return loop(model, on_step), [len(calls)]

    # The compiled backward hands the parameters' gradients to their hooks in another
    # order than eager, so each draws other noise (a plain torch.compile does the same):
    # compared with the hook compiling unchecked, the check adds no draw and no call.
    assert_invisible(script, against_unchecked=True)


def test_running_statistics_in_a_plain_attribute_and_a_momentum_encoder():
    def script(on_step):
        stats, moco = RunningStats(), Momentum()
        losses = loop(stats, on_step)

        def contrastive(logits, step):
            return nn.functional.cross_entropy(logits, torch.arange(logits.shape[0]))

        losses += loop(moco, on_step, contrastive)
        extra = stats.mean.tolist() + moco.key.weight.flatten().tolist()
        return losses, extra + moco.queue.flatten().tolist()

    assert_invisible(script)


def test_forward_hooks_that_collect_features_and_a_list_argument():
    class Aux(Net):
        def forward(self, x, aux=None):
            h = torch.tanh(self.a(x))
            if aux is not None:
                aux.append(h.pow(2).mean())
            return self.b(h)

    def script(on_step):
        model = Aux()
        features: list[Any] = []
        model.a.register_forward_hook(lambda mod, args, out: features.append(out))
        opt = torch.optim.SGD(model.parameters(), lr=0.05)
        losses, counts = [], []
        for _ in range(STEPS):
            features.clear()
            aux: list[Any] = []
            out = model(torch.randn(6, 4), aux)
            loss = out.pow(2).mean() + sum(aux) + sum(f.abs().mean() for f in features)
            counts.append(len(features) + len(aux))
            opt.zero_grad()
            loss.backward()
            opt.step()
            on_step()
            losses.append(float(loss))
        return losses, counts

    assert_invisible(script)


def test_two_backwards_with_retain_graph_pcgrad():
    def script(on_step):
        model = Net()
        opt = torch.optim.SGD(model.parameters(), lr=0.05)
        losses = []
        for _ in range(STEPS):
            out = model(torch.randn(6, 4))
            first, second = out.pow(2).mean(), out.abs().mean()
            opt.zero_grad()
            first.backward(retain_graph=True)
            kept = [p.grad.clone() for p in model.parameters()]
            opt.zero_grad()
            second.backward()
            for param, grad in zip(model.parameters(), kept, strict=True):
                param.grad += grad
            opt.step()
            on_step()
            losses.append(float(first) + float(second))
        return losses, []

    assert_invisible(script)


def test_a_parameter_returned_from_forward_keeps_no_hook_of_ours():
    class Returns(Net):
        def forward(self, x):
            return super().forward(x), self.b.weight

    def script(on_step):
        model = Returns()
        losses = loop(model, on_step, lambda out, step: out[0].pow(2).mean() + out[1].sum())
        return losses, [len(model.b.weight._backward_hooks or {})]

    assert_invisible(script)


def test_an_output_the_script_scales_in_place_trains_as_eager():
    """HF Trainer scales the model's loss in place (``loss *= ...``): eager allows it, and
    the check's node kept the output with a version check that refused it (found by the
    corpus's Trainer script once its compile was checked)."""

    def script(on_step: Any) -> tuple[list[float], list[float]]:
        def loss_of(out: Any, step: int) -> Any:
            out *= 0.5  # the module's own output: the loss it computed
            return out

        return loop(WithLoss(), on_step, loss_of), []

    assert_invisible(script)
