"""Regional compilation (trcomp.contract.regions) with real torch modules and dynamo's counters.

Compiled with dynamo's ``eager`` backend (tracing, no code generation): what is
asserted is how many graphs dynamo made, which does not depend on the backend.
"""

from __future__ import annotations

import pytest

from trcomp.contract import regions

torch = pytest.importorskip("torch")
nn = torch.nn


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


def captured() -> int:
    """Calls dynamo traced into graphs: grows with every block it traces."""
    from torch._dynamo.utils import counters

    return int(counters["stats"]["calls_captured"])


def compile_and_train(layers: int, regional: bool) -> tuple[int, int]:
    """(graphs, calls traced) for a fresh ``Stack(layers)`` trained 3 steps."""
    from torch._dynamo.utils import counters

    counters.clear()
    torch._dynamo.reset()
    model = Stack(layers)
    if regional:
        (group,) = regions.compile_regions(model, torch, {"backend": "eager"})
        assert group.path == "blocks" and group.describe() == f"{layers} x Block"
        assert all(block._compiled_call_impl is not None for block in model.blocks)
        assert model._compiled_call_impl is None  # the rest runs eager
    else:
        model.compile(backend="eager")
    train(model)
    return graphs(), captured()


def test_n_identical_blocks_compile_to_one_graph_traced_once() -> None:
    two, six = compile_and_train(2, regional=True), compile_and_train(6, regional=True)
    assert two[0] == six[0] == 1
    assert six[1] == two[1]  # one block traced, whatever the number of layers
    # Compiled whole, the same model traces every block: what regional compilation saves.
    whole_two, whole_six = compile_and_train(2, regional=False), compile_and_train(6, False)
    assert whole_six[1] > whole_two[1] > two[1]


def test_torch_nn_blocks_are_compiled_too() -> None:
    # Module.compile() on a TransformerEncoderLayer compiles nothing (dynamo skips
    # torch.nn's frames); regions.entered gives dynamo a frame it traces.
    layer = nn.TransformerEncoderLayer(8, 2, 16, dropout=0.0, batch_first=True)
    body = nn.TransformerEncoder(layer, 4, enable_nested_tensor=False)
    model = nn.Sequential(nn.Embedding(16, 8), body)
    (group,) = regions.compile_regions(model, torch, {"backend": "eager"})
    assert group.path == "1.layers" and group.describe() == "4 x TransformerEncoderLayer"
    train(model)
    assert graphs() == 1


def test_gpt2_blocks_built_from_a_config_share_one_graph() -> None:
    transformers = pytest.importorskip("transformers")
    config = transformers.GPT2Config(
        n_layer=4, n_embd=16, n_head=2, n_positions=16, vocab_size=32, use_cache=False,
        bos_token_id=31, eos_token_id=31, resid_pdrop=0.0, embd_pdrop=0.0, attn_pdrop=0.0,
    )  # fmt: skip
    model = transformers.GPT2LMHeadModel(config)
    (group,) = regions.compile_regions(model, torch, {"backend": "eager"})
    assert group.path == "transformer.h" and group.describe() == "4 x GPT2Block"
    ids = torch.randint(0, 32, (2, 8), generator=torch.Generator().manual_seed(0))
    for _ in range(2):
        model(input_ids=ids, labels=ids).loss.backward()
    assert graphs() == 1


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


def test_regional_training_matches_eager() -> None:
    torch.manual_seed(0)
    eager = Stack(4)
    compiled = Stack(4)
    compiled.load_state_dict(eager.state_dict())
    regions.compile_regions(compiled, torch, {"backend": "eager"})
    assert train(compiled) == pytest.approx(train(eager), abs=1e-6)
    assert list(compiled.state_dict()) == list(eager.state_dict())  # keys unchanged
