"""Regional compilation (trcomp.runtime.regions) with real torch modules and dynamo's counters.

Compiled with ``aot_eager`` (dynamo and AOTAutograd, no code generation; dynamo's
``eager`` backend cannot run a nested region's backward) through a backend that
keeps each graph dynamo made: what is asserted is the graphs' structure (how
many block calls, how many distinct block subgraphs), not the backend's code.
"""

from __future__ import annotations

import pytest

from trcomp.runtime import regions

torch = pytest.importorskip("torch")
nn = torch.nn

# torch 2.9's nested regions cannot capture a block that writes into an object made
# outside it (GPT-2's KV cache): dynamo raises UncapturedHigherOrderOpError (side
# effects) and the model is compiled whole. torch 2.14 captures such a block: the four
# blocks stay one subgraph, with eager's losses and gradients.
REGIONS_CAPTURE_THE_KV_CACHE = torch.torch_version.TorchVersion(torch.__version__) >= "2.14"


class Block(nn.Module):
    def __init__(self, width: int = 8) -> None:
        super().__init__()
        self.norm = nn.LayerNorm(width)
        self.mlp = nn.Sequential(
            nn.Linear(width, 2 * width), nn.GELU(), nn.Linear(2 * width, width)
        )

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x + self.mlp(self.norm(x))


class Stack(nn.Module):
    def __init__(self, layers: int) -> None:
        super().__init__()
        self.embed = nn.Embedding(16, 8)
        self.blocks = nn.ModuleList(Block() for _ in range(layers))
        self.head = nn.Linear(8, 16)

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        x = self.embed(tokens)
        for block in self.blocks:
            x = block(x)
        return self.head(x)


def graphs() -> int:
    from torch._dynamo.utils import counters

    return int(counters["stats"]["unique_graphs"])


class Keeping:
    """A ``torch.compile`` backend that keeps each graph and runs it with aot_eager."""

    def __init__(self) -> None:
        self.graphs: list[torch.fx.GraphModule] = []

    def __call__(self, gm: torch.fx.GraphModule, example_inputs: list) -> object:
        from torch._dynamo.backends.debugging import aot_eager

        self.graphs.append(gm)
        return aot_eager(gm, example_inputs)

    def block_calls(self) -> tuple[int, int]:
        """(calls of a block subgraph, distinct block subgraphs) over the graphs kept."""
        calls, bodies = 0, set()
        for gm in self.graphs:
            for node in gm.graph.nodes:
                if node.target is torch.ops.higher_order.invoke_subgraph:
                    calls += 1
                    bodies.add(node.args[0].target)
        return calls, len(bodies)


def compile_in_place(model: nn.Module, regional: bool = True, **kwargs) -> Keeping:
    """What the hook and ``trcomp.runtime.compile`` do; the backend, to look at the graphs."""
    keeping = Keeping()
    call = regions.compile_in_place(model, torch, {"backend": keeping, **kwargs}, regional=regional)
    model._compiled_call_impl = call
    return keeping


@pytest.fixture(autouse=True)
def fresh_dynamo():
    from torch._dynamo.utils import counters

    counters.clear()
    torch._dynamo.reset()
    yield
    torch._dynamo.reset()


def train(model: nn.Module, steps: int = 3) -> list[float]:
    tokens = torch.randint(0, 16, (2, 5), generator=torch.Generator().manual_seed(0))
    losses = []
    for _ in range(steps):
        loss = model(tokens).square().mean()
        loss.backward()
        losses.append(float(loss.detach()))
    return losses


def test_n_identical_blocks_are_one_subgraph_called_n_times() -> None:
    for layers in (2, 6):
        torch._dynamo.reset()
        model = Stack(layers)
        keeping = compile_in_place(model)
        (group,) = model._compiled_call_impl.groups
        assert group.path == "blocks" and group.describe() == f"{layers} x Block"
        train(model)
        assert len(keeping.graphs) == 1  # the model is still one graph
        assert keeping.block_calls() == (layers, 1)
    # Compiled whole, the same model inlines every block: no subgraph to reuse.
    torch._dynamo.reset()
    whole = Stack(6)
    keeping = compile_in_place(whole, regional=False)
    train(whole)
    assert len(keeping.graphs) == 1 and keeping.block_calls() == (0, 0)


def test_torch_nn_blocks_are_regions_too() -> None:
    # Module.compile() on a TransformerEncoder compiles nothing (dynamo skips
    # torch.nn's frames); regions.entered gives dynamo a frame it traces.
    layer = nn.TransformerEncoderLayer(8, 2, 16, dropout=0.0, batch_first=True)
    body = nn.TransformerEncoder(layer, 4, enable_nested_tensor=False)
    model = nn.Sequential(nn.Embedding(16, 8), body)
    keeping = compile_in_place(model)
    assert model._compiled_call_impl.describe() == "4 x TransformerEncoderLayer"
    assert model._compiled_call_impl.groups[0].path == "1.layers"
    train(model)
    assert keeping.block_calls() == (4, 1)


def gpt2(use_cache: bool) -> nn.Module:
    transformers = pytest.importorskip("transformers")
    config = transformers.GPT2Config(
        n_layer=4, n_embd=16, n_head=2, n_positions=16, vocab_size=32, use_cache=use_cache,
        bos_token_id=31, eos_token_id=31, resid_pdrop=0.0, embd_pdrop=0.0, attn_pdrop=0.0,
    )  # fmt: skip
    torch.manual_seed(0)
    return transformers.GPT2LMHeadModel(config)


def train_lm(model: nn.Module, steps: int = 2) -> list[float]:
    ids = torch.randint(0, 32, (2, 8), generator=torch.Generator().manual_seed(0))
    losses = []
    for _ in range(steps):
        loss = model(input_ids=ids, labels=ids).loss
        loss.backward()
        losses.append(float(loss.detach()))
    return losses


def test_gpt2_blocks_built_from_a_config_are_one_subgraph() -> None:
    model = gpt2(use_cache=False)
    keeping = compile_in_place(model)
    assert model._compiled_call_impl.describe() == "4 x GPT2Block"
    assert model._compiled_call_impl.groups[0].path == "transformer.h"
    train_lm(model)
    assert keeping.block_calls() == (4, 1)


def test_a_block_that_updates_the_kv_cache_compiles_whole_where_torch_cannot_capture_it() -> None:
    # With use_cache on, each GPT2Block writes its layer of a cache object made
    # outside it: a side effect torch 2.9's nested regions cannot capture.
    model, eager = gpt2(use_cache=True), gpt2(use_cache=True)
    keeping = compile_in_place(model)
    losses = train_lm(model)
    call = model._compiled_call_impl
    assert losses == pytest.approx(train_lm(eager), abs=1e-5)
    if REGIONS_CAPTURE_THE_KV_CACHE:
        assert call.describe() == "4 x GPT2Block" and call.unmarked is None
        assert keeping.block_calls() == (4, 1)
        return
    assert call.groups == [] and call.describe() is None
    assert call.unmarked and "UncapturedHigherOrderOpError" in call.unmarked
    assert "forward" not in vars(model.transformer.h[0])  # the marks are off
    assert keeping.graphs and keeping.block_calls() == (0, 0)


def test_a_graph_break_in_a_block_makes_the_model_compile_whole() -> None:
    class Breaking(Block):
        def forward(self, x: torch.Tensor) -> torch.Tensor:
            torch._dynamo.graph_break()
            return super().forward(x)

    torch.manual_seed(0)
    model, eager = Stack(3), Stack(3)
    model.blocks = nn.ModuleList(Breaking() for _ in range(3))
    eager.blocks = nn.ModuleList(Breaking() for _ in range(3))
    eager.load_state_dict(model.state_dict())
    keeping = compile_in_place(model)
    assert train(model) == pytest.approx(train(eager), abs=1e-6)
    assert model._compiled_call_impl.unmarked is not None
    assert keeping.graphs and keeping.block_calls() == (0, 0)  # compiled whole


def test_what_is_not_a_repeated_block() -> None:
    find = regions.repeated_blocks
    assert find(nn.Sequential(nn.Linear(4, 4), nn.Linear(4, 4)), torch) == []  # leaves
    assert find(nn.Sequential(nn.Linear(4, 4), nn.ReLU(), nn.Linear(4, 4)), torch) == []
    assert find(Stack(1), torch) == []  # one copy: nothing to reuse
    mixed = nn.ModuleList([Block(), nn.Sequential(nn.Linear(8, 8), nn.ReLU())])
    assert find(mixed, torch) == []


def test_groups_are_found_outermost_first_and_not_inside_a_block() -> None:
    class Nested(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.inner = Stack(2)  # its blocks live inside the outer blocks' siblings

    class Outer(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.encoder = nn.ModuleList(Nested() for _ in range(3))
            self.decoder = nn.Sequential(Block(), Block())

    groups = regions.repeated_blocks(Outer(), torch)
    assert [(g.path, g.describe()) for g in groups] == [
        ("encoder", "3 x Nested"),
        ("decoder", "2 x Block"),
    ]


def test_regional_training_matches_eager_and_keeps_the_model_as_it_was() -> None:
    torch.manual_seed(0)
    eager = Stack(4)
    compiled = Stack(4)
    compiled.load_state_dict(eager.state_dict())
    compile_in_place(compiled)
    assert train(compiled) == pytest.approx(train(eager), abs=1e-6)
    assert list(compiled.state_dict()) == list(eager.state_dict())  # keys unchanged
    # A copy (an EMA model, say) runs its own block, not the original's.
    copy = __import__("copy").deepcopy(compiled.blocks[0])
    assert copy.forward.__self__ is copy
    # Each block's own weights: torch 2.14 reused the first block's subgraph, with its
    # weights, for every block marked as a bound method (regions.mark_regions).
    for block in compiled.blocks:
        assert all(param.grad is not None for param in block.parameters())


def test_marks_come_off_and_a_block_wrapped_by_another_library_is_left_alone() -> None:
    model = Stack(3)
    (group,) = regions.mark_regions(model, torch)
    assert all("forward" in vars(block) for block in model.blocks)
    regions.unmark_regions([group])
    assert all("forward" not in vars(block) for block in model.blocks)
    model.blocks[1].forward = model.blocks[1].forward  # an instance forward of its own
    assert regions.mark_regions(model, torch) == []


def test_the_runtime_path_returns_an_optimized_module_that_falls_back_whole_too() -> None:
    # trcomp.runtime.compile: torch.compile(model) with the blocks marked; the
    # hook then sees an OptimizedModule, as for any script that compiles its model.
    model, eager = gpt2(use_cache=True), gpt2(use_cache=True)
    keeping = Keeping()
    optimized = regions.compile_wrapped(model, torch, {"backend": keeping})
    assert type(optimized).__name__ == "OptimizedModule" and optimized._orig_mod is model
    assert optimized.forward.describe() == "4 x GPT2Block"
    assert train_lm(optimized) == pytest.approx(train_lm(eager), abs=1e-5)
    if REGIONS_CAPTURE_THE_KV_CACHE:
        assert optimized.forward.describe() == "4 x GPT2Block" and keeping.block_calls() == (4, 1)
    else:
        assert optimized.forward.describe() is None and "SideEffects" in optimized.forward.unmarked
        assert keeping.graphs and keeping.block_calls() == (0, 0)
    # Without the KV cache the blocks stay one region.
    plain = gpt2(use_cache=False)
    keeping = Keeping()
    optimized = regions.compile_wrapped(plain, torch, {"backend": keeping})
    train_lm(optimized)
    assert optimized.forward.describe() == "4 x GPT2Block" and keeping.block_calls() == (4, 1)
