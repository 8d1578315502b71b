"""The compile policy of the zero-code path, in this process with real torch modules.

Compiled with dynamo's ``eager`` backend (tracing without code generation), so
these run in seconds; tests/container/test_autocompile.py runs the real jobs.
"""

from __future__ import annotations

import pytest

from trcomp_container.inprocess import autocompile

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
    hooks.end_search()
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
    # The hook tells the script's calls from autograd's (checkpoint recomputation).
    assert torch._C._current_graph_task_id() == -1
    # The speed-up measurement exchanges its figures through the default c10d store.
    from torch.distributed import distributed_c10d

    assert callable(distributed_c10d._get_default_store)


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
    # Looked at again at each call until the first optimizer step: the last reason holds.
    assert policy.compiled == [] and policy.skipped == {"Linear": "eval mode"}


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
    policy.end_search()
    nn.Linear(4, 4)(torch.randn(2, 4))
    assert policy.compiled == [] and not policy.active


class Block(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.norm = nn.LayerNorm(8)
        self.proj = nn.Linear(8, 8)

    def forward(self, x):
        return x + self.proj(self.norm(x))


class Blocks(nn.Module):
    def __init__(self, layers: int = 4) -> None:
        super().__init__()
        self.embed = nn.Linear(4, 8)
        self.layers = nn.ModuleList(Block() for _ in range(layers))

    def forward(self, x):
        x = self.embed(x)
        for layer in self.layers:
            x = layer(x)
        return x


def regional_hooks(regional: bool = True, **kwargs) -> autocompile.AutoCompile:
    # aot_eager: dynamo's eager backend cannot run a nested region's backward.
    torch._dynamo.reset()
    hooks = autocompile.AutoCompile(
        torch, compile_kwargs={"backend": "aot_eager", **kwargs}, fallback_eager=True,
        regional=regional,
    )  # fmt: skip
    hooks.install()
    return hooks


def train_blocks(hooks: autocompile.AutoCompile, model: nn.Module, steps: int = 3) -> None:
    try:
        for _ in range(steps):
            model(torch.randn(2, 4)).sum().backward()
    finally:
        hooks.end_search()
        torch._dynamo.reset()


def test_a_model_with_repeated_blocks_is_compiled_with_its_blocks_as_regions(policy):
    policy.end_search()
    hooks = regional_hooks()
    model = Blocks(4)
    train_blocks(hooks, model)
    (entry,) = hooks.compiled
    assert entry.name == "Blocks" and entry.regional == "4 x Block" and entry.failed is None
    assert entry.as_dict()["regional"] == "4 x Block" and entry.as_dict()["regional_off"] is None
    assert model._compiled_call_impl is not None  # the model, compiled in place
    assert all("forward" in vars(layer) for layer in model.layers)  # each block marked
    assert graphs() == 1


def test_regional_false_compiles_the_whole_model(policy):
    policy.end_search()
    hooks = regional_hooks(regional=False)
    model = Blocks(4)
    train_blocks(hooks, model, steps=2)
    (entry,) = hooks.compiled
    assert entry.regional is None and model._compiled_call_impl is not None
    assert all("forward" not in vars(layer) for layer in model.layers)


def test_a_model_whose_blocks_the_script_compiled_is_not_compiled_again(policy):
    model = Blocks(3)
    for layer in model.layers:  # Accelerate's regional compilation: each block on its own
        layer.compile(backend="eager")
    model(torch.randn(2, 4)).sum().backward()
    assert policy.compiled == [] and policy.script_compiled == ["Blocks"]
    assert model._compiled_call_impl is None


class Broken(Block):
    """A block with a graph break: not one graph, so not a nested region."""

    def forward(self, x):
        torch._dynamo.graph_break()
        return super().forward(x)


def test_a_block_with_a_graph_break_leaves_regions_off_and_the_entry_says_why(policy):
    policy.end_search()
    hooks = regional_hooks()
    model = Blocks(2)
    model.layers = nn.ModuleList(Broken() for _ in range(2))
    train_blocks(hooks, model, steps=2)
    (entry,) = hooks.compiled
    assert entry.regional is None and entry.failed is None  # compiled whole
    assert "UncapturedHigherOrderOpError" in entry.as_dict()["regional_off"]


def test_a_block_that_fails_whole_too_runs_eager_and_the_entry_says_why(policy):
    policy.end_search()
    hooks = regional_hooks(fullgraph=True)
    model = Blocks(2)
    model.layers = nn.ModuleList(Broken() for _ in range(2))
    train_blocks(hooks, model, steps=2)
    (entry,) = hooks.compiled
    assert entry.failed and "Unsupported" in entry.failed
