"""The compile policy of the zero-code path, in this process with real torch modules.

Compiled with dynamo's ``eager`` backend (tracing without code generation), so
these run in seconds; tests/container/test_autocompile.py runs the real jobs.
"""

from __future__ import annotations

import pytest

from tests.helpers.hook import hook_module

autocompile = hook_module("trcomp_autocompile")
torch = pytest.importorskip("torch")
nn = torch.nn


def graphs() -> int:
    from torch._dynamo.utils import counters

    return int(counters["stats"]["unique_graphs"])


@pytest.fixture
def policy():
    from torch._dynamo.utils import counters

    counters.clear()  # graphs() counts this test's graphs only
    torch._dynamo.reset()
    hooks = autocompile.AutoCompile(torch, compile_kwargs={"backend": "eager"}, fallback_eager=True)
    hooks.install()
    yield hooks
    hooks.remove()
    torch._dynamo.reset()


def test_torch_still_has_the_names_the_policy_relies_on():
    # Module.compile() keeps its callable in _compiled_call_impl and _wrapped_call_impl
    # calls it; the policy sets the same attribute. This fails if torch renames them.
    module = nn.Linear(2, 2)
    assert module._compiled_call_impl is None and callable(module._call_impl)
    module.compile(backend="eager")
    assert module._compiled_call_impl is not None
    assert issubclass(torch._dynamo.OptimizedModule, nn.Module)
    errors = torch._dynamo.exc
    assert issubclass(errors.BackendCompilerFailed, errors.TorchDynamoException)


def test_the_outermost_trained_module_is_compiled_in_place_once(policy):
    model = nn.Sequential(nn.Linear(4, 8), nn.ReLU(), nn.Linear(8, 1))
    for _ in range(3):
        model(torch.randn(2, 4)).sum().backward()
    (entry,) = policy.compiled
    assert entry.name == "Sequential" and entry.failed is None
    assert graphs() == 1  # a torch.nn container too: its frames are not skipped


def test_eval_mode_no_grad_and_parameterless_modules_are_left_eager(policy):
    reason = autocompile.candidate_reason
    assert reason(nn.Linear(4, 4).eval(), torch) == "eval mode"
    assert reason(nn.Linear(4, 4).requires_grad_(False), torch) == "no trainable parameters"
    assert reason(nn.MSELoss(), torch) == "no trainable parameters"
    with torch.no_grad():
        assert reason(nn.Linear(4, 4), torch) == "called with gradients disabled"
        nn.Linear(4, 4)(torch.randn(2, 4))
    nn.Linear(4, 4).eval()(torch.randn(2, 4))
    assert policy.compiled == [] and policy.skipped == {"Linear": "called with gradients disabled"}


def test_a_model_the_script_compiled_is_not_compiled_again(policy):
    model = torch.compile(nn.Linear(4, 4), backend="eager")
    model(torch.randn(2, 4)).sum().backward()
    assert policy.compiled == [] and policy.script_compiled == ["Linear"]
    assert graphs() == 1


def test_a_module_called_inside_another_is_not_a_candidate(policy):
    class Outer(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.inner = nn.Linear(4, 4)

        def forward(self, x):
            return self.inner(x)

    Outer()(torch.randn(2, 4)).sum().backward()
    assert [entry.name for entry in policy.compiled] == ["Outer"]


def test_after_remove_new_modules_are_not_compiled(policy):
    policy.remove()
    nn.Linear(4, 4)(torch.randn(2, 4))
    assert policy.compiled == [] and not policy.active
