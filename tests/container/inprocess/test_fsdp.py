"""FSDP2 under the zero-code hook: each block compiled inside FSDP's hooks, and checked.

In this process with real torch and real FSDP2 (``fully_shard``) on a one-rank
gloo group; dynamo's ``aot_eager`` backend, or a backend wrong on purpose. The
two-rank run (real all-gathers) is the corpus's ``fsdp2_two_ranks.py``.
"""

from __future__ import annotations

import pytest

from tests.container.inprocess.test_verify import (  # noqa: F401 (an autouse fixture)
    _fresh_dynamo,
    hooks,
    run_steps,
)
from trcomp_container.inprocess import fsdp, torch_compat
from trcomp_container.inprocess.policy import candidate_reason

torch = pytest.importorskip("torch")
nn = torch.nn
dist = torch.distributed
fully_shard = pytest.importorskip("torch.distributed.fsdp").fully_shard


_MESH: list = []


@pytest.fixture(autouse=True)
def one_rank(_fresh_dynamo):  # noqa: F811 (test_verify's fixture undoes the hooks after it)
    from torch.distributed.device_mesh import init_device_mesh

    dist.init_process_group("gloo", store=dist.HashStore(), rank=0, world_size=1)
    # A CPU mesh named, not found: fully_shard's default asks torch for the accelerator,
    # which fails in a process where an earlier test renamed the PrivateUse1 backend.
    _MESH[:] = [init_device_mesh("cpu", (1,))]
    yield
    dist.destroy_process_group()


def shard(module: nn.Module) -> None:
    fully_shard(module, mesh=_MESH[0])


class Block(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.norm = nn.LayerNorm(8)
        self.lin = nn.Linear(8, 8)

    def forward(self, x):
        return x + torch.tanh(self.lin(self.norm(x)))


class Net(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.embed = nn.Linear(4, 8)
        self.blocks = nn.ModuleList(Block() for _ in range(3))
        self.head = nn.Linear(8, 1)

    def forward(self, x):
        x = self.embed(x)
        for block in self.blocks:
            x = block(x)
        return self.head(x)


def sharded() -> nn.Module:
    torch.manual_seed(0)
    model = Net()
    for block in model.blocks:
        shard(block)
    shard(model)
    return model


def train(policy=None, steps: int = 5) -> list[float]:
    generator = torch.Generator().manual_seed(1)
    batches = [torch.randn(6, 4, generator=generator) for _ in range(steps)]
    try:
        return run_steps(sharded(), batches, policy)
    finally:
        if policy is not None:
            policy.end_search()


def backward_scaled_by(factor: float):
    """A backend whose forward is right and whose backward scales every gradient."""
    from functorch.compile import make_boxed_func
    from torch._dynamo.backends.common import aot_autograd

    def scaled(gm, example_inputs):
        def run(*args):
            return [o * factor if o is not None and o.is_floating_point() else o for o in gm(*args)]

        return make_boxed_func(run)

    def forward(gm, example_inputs):
        return make_boxed_func(gm.forward)

    return aot_autograd(fw_compiler=forward, bw_compiler=scaled)


def test_each_block_is_compiled_inside_fsdps_hooks_and_checked_and_the_root_stays_eager():
    eager = train()
    graphs = torch_compat.unique_graphs()
    policy = hooks()
    losses = train(policy)
    names = [entry.name for entry in policy.compiled]
    assert names == [f"FSDPNet.blocks.{i}" for i in range(3)]
    for entry in policy.compiled:
        assert entry.block_of == "FSDPNet" and entry.verified is True, entry.as_dict()
        assert entry.ran_compiled and entry.eager_calls == 0
    # One traced function for the class: the blocks after the first reuse its graph
    # (the first block's input needs no gradient, the others' does: 2 graphs, not 3).
    assert torch_compat.unique_graphs() - graphs == 2
    assert losses == pytest.approx(eager, abs=1e-5)


def test_a_block_whose_compiled_backward_is_wrong_is_caught_and_trains_as_eager():
    # The gathered parameters are the block's during its forward: the check compares
    # their gradients (FSDP's sharded parameters would have none to compare).
    eager = train()
    policy = hooks(compile_kwargs={"backend": backward_scaled_by(1.5)})
    losses = train(policy)
    for entry in policy.compiled:
        assert entry.verified is False and not entry.ran_compiled
        assert entry.failed.startswith("verification: the gradient of norm.weight"), entry.failed
    assert losses == pytest.approx(eager, abs=1e-6)


class Cache:
    """What transformers' DynamicCache is to a block: an object each block's forward extends."""

    def __init__(self) -> None:
        self.kept: list = []


class CachedBlock(Block):
    def forward(self, x, cache):
        cache.kept.append(x.detach())
        return super().forward(x + 0.1 * cache.kept[0])


class CachedNet(Net):
    def __init__(self) -> None:
        super().__init__()
        self.blocks = nn.ModuleList(CachedBlock() for _ in range(3))
        self.seen: list[int] = []

    def forward(self, x):
        cache = Cache()
        x = self.embed(x)
        for block in self.blocks:
            x = block(x, cache)
        self.seen.append(len(cache.kept))
        return self.head(x)


def test_a_block_whose_call_takes_an_object_it_changes_is_checked_and_changes_it_once():
    # The check runs the captured graph on copies; the block's Python code (the cache's
    # extension, a side effect dynamo replays after the graph) runs once per call. It was
    # left eager before the check moved into the backend (the cache was extended twice).
    def run(policy=None):
        torch.manual_seed(0)
        model = CachedNet()
        for block in model.blocks:
            shard(block)
        shard(model)
        generator = torch.Generator().manual_seed(1)
        batches = [torch.randn(6, 4, generator=generator) for _ in range(4)]
        try:
            return run_steps(model, batches, policy), model.seen
        finally:
            if policy is not None:
                policy.end_search()

    eager, eager_seen = run()
    policy = hooks()
    losses, seen = run(policy)
    assert seen == eager_seen == [3] * 4
    for entry in policy.compiled:
        assert entry.verified is True and entry.ran_compiled, entry.as_dict()
    assert losses == pytest.approx(eager, abs=1e-5)


def test_a_model_sharded_only_at_its_root_is_compiled_whole():
    torch.manual_seed(0)
    model = Net()
    shard(model)
    assert fsdp.blocks(model) == []
    assert fsdp.blocks(Net()) == []  # not sharded at all


def test_fsdp1_is_left_eager_with_its_reason():
    # FSDP1 cannot run on a CPU-only host ("FSDP needs a non-CPU accelerator device"):
    # an instance made without its __init__ stands for a wrapped unit here.
    from torch.distributed.fsdp import FullyShardedDataParallel

    unit = FullyShardedDataParallel.__new__(FullyShardedDataParallel)
    nn.Module.__init__(unit)
    assert candidate_reason(nn.Sequential(unit, nn.Linear(2, 2)), torch) == fsdp.FSDP1_REASON
