"""The no-harm contract of the zero-code path (docs/runtime.md#the-no-harm-contract).

Each test is a pattern that broke, slowed or changed a correct script under the
old hook: an error inside the hook, a lazy module, a validation pass before
training, a compiled helper, nn.DataParallel, many module classes, dynamo's
recompile limit, a failing compile after a graph break, frozen or checkpointed
blocks under regional compilation, and saving the model whole. They run in
this process with real torch: dynamo's ``aot_eager`` backend where the pattern
is the hook's own logic, inductor where it is inductor's numbers.
"""

from __future__ import annotations

import copy
import io

import pytest

from trcomp.contract.runtime_config import RuntimeConfig
from trcomp.runtime import regions
from trcomp_container.inprocess import autocompile
from trcomp_container.inprocess import switch as switch_module
from trcomp_container.inprocess.settings import Settings
from trcomp_container.inprocess.speedup.key import module_signature

switch_report = pytest.importorskip("trcomp_container.switch_report")
rank_record = pytest.importorskip("trcomp_container.inprocess.record")
torch = pytest.importorskip("torch")
nn = torch.nn


@pytest.fixture(autouse=True)
def _fresh_dynamo():
    from torch._dynamo.utils import counters

    counters.clear()
    torch._dynamo.reset()
    yield
    torch._dynamo.reset()


def graphs() -> int:
    from torch._dynamo.utils import counters

    return int(counters["stats"]["unique_graphs"])


def _record(**parts):
    """A rank record with these parts (what the switch report reads)."""
    return rank_record.RankRecord.from_json(parts)


def hooks(**kwargs) -> autocompile.AutoCompile:
    options = {"compile_kwargs": {"backend": "aot_eager"}, "fallback_eager": True, **kwargs}
    policy = autocompile.AutoCompile(torch, **options)
    policy.install()
    return policy


class Block(nn.Module):
    def __init__(self, width: int = 8) -> None:
        super().__init__()
        self.norm = nn.LayerNorm(width)
        self.proj = nn.Linear(width, width)

    def forward(self, x):
        return x + self.proj(self.norm(x))


class Net(nn.Module):
    def __init__(self, layers: int = 2, width: int = 8) -> None:
        super().__init__()
        self.embed = nn.Linear(4, width)
        self.layers = nn.ModuleList(Block(width) for _ in range(layers))
        self.head = nn.Linear(width, 1)

    def forward(self, x):
        x = self.embed(x)
        for layer in self.layers:
            x = layer(x)
        return self.head(x)


def train(model: nn.Module, steps: int = 4, seed: int = 0) -> list[float]:
    """Per-step losses of a plain loop (the first optimizer step ends the hook's search)."""
    torch.manual_seed(seed)
    batches = [torch.randn(6, 4) for _ in range(steps)]
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    losses = []
    for x in batches:
        loss = model(x).pow(2).mean()
        loss.backward()
        opt.step()
        opt.zero_grad()
        losses.append(float(loss))
    return losses


def test_an_error_inside_the_hook_leaves_the_script_running_and_is_reported():
    class Odd(Net):
        def modules(self):  # the hook walks the modules: this one raises
            raise RuntimeError("boom")

    policy = hooks()
    try:
        torch.manual_seed(0)
        model = Odd()
        assert train(model, steps=2)  # no exception reached the script
        assert not policy.active and policy.compiled == []
    finally:
        policy.end_search()
    assert "RuntimeError: boom" in policy.report()["error"]
    warnings = switch_report.compiled_less([_record(autocompile=policy.report())])
    assert any("the zero-code hook stopped" in warning for warning in warnings)


def test_a_lazy_module_is_compiled_once_materialized_and_trains_as_eager():
    def lazy_net() -> nn.Module:
        torch.manual_seed(0)
        return nn.Sequential(nn.LazyLinear(8), nn.ReLU(), nn.Linear(8, 1))

    def run() -> list[float]:
        model = lazy_net()
        # Two forwards before the first optimizer step: the second sees real parameters.
        model(torch.randn(2, 4)).sum().backward()
        model.zero_grad()
        return train(model)

    eager = run()
    policy = hooks()
    try:
        compiled = run()
    finally:
        policy.end_search()
    (entry,) = policy.compiled
    assert entry.name == "Sequential" and entry.ran_compiled
    assert compiled == pytest.approx(eager, abs=1e-6)
    assert "lazy" in module_signature(nn.LazyLinear(3))


def test_a_validation_pass_before_training_does_not_keep_the_model_eager():
    policy = hooks()
    try:
        torch.manual_seed(0)
        model = Net()
        model.eval()
        with torch.no_grad():
            model(torch.randn(2, 4))
        model.train()
        train(model)
    finally:
        policy.end_search()
    (entry,) = policy.compiled
    assert entry.name == "Net" and entry.ran_compiled and policy.skipped == {}


def test_an_inference_script_loses_the_hooks_after_a_bounded_number_of_calls(monkeypatch):
    monkeypatch.setattr(autocompile, "MAX_LOOKS", 5)
    policy = hooks()
    try:
        model = Net().eval()
        with torch.no_grad():
            for _ in range(4):
                model(torch.randn(2, 4))
            assert policy.active
            model(torch.randn(2, 4))
        assert not policy.active and policy.compiled == []
    finally:
        policy.end_search()


def test_a_compiled_helper_before_the_model_does_not_end_the_zero_code_path():
    from torch._dynamo.callback import callback_handler

    config = RuntimeConfig(enabled=True, backend="inductor", engine="inductor")
    switch = switch_module.Switch(torch, config, Settings.from_env({}))
    assert switch.autocompile is not None
    switch.autocompile.compile_kwargs = {"backend": "aot_eager"}

    def started(args):
        switch.before_compile()

    callback_handler.register_start_callback(started)
    try:
        normalize = torch.compile(lambda x: (x - x.mean()) / (x.std() + 1e-5), backend="eager")
        normalize(torch.randn(8, 4))  # the script's own helper compiles first
        assert switch.autocompile.active
        torch.manual_seed(0)
        model = Net()
        for step in range(1, 5):  # steps 2 and 3 are checked against eager
            model(normalize(torch.randn(6, 4))).sum().backward()
            switch.on_step(step, compile_events=1, clock=None)
    finally:
        callback_handler.remove_start_callback(started)
        switch.autocompile.end_search()
    (entry,) = switch.autocompile.compiled
    assert entry.name == "Net" and entry.ran_compiled


def test_unfreezing_parameters_after_the_compile_compiles_afresh_and_trains_as_eager():
    # torch 2.9 alone (torch.compile(model)) reuses the graph traced with frozen
    # parameters: the unfrozen ones got no gradients and the losses drifted.
    def two_phases() -> list[float]:
        torch.manual_seed(0)
        model = Net()
        model.embed.requires_grad_(False)
        losses = train(model, steps=3)
        model.embed.requires_grad_(True)
        return losses + train(model, steps=3, seed=1)

    eager = two_phases()
    policy = hooks()
    try:
        compiled = two_phases()
    finally:
        policy.end_search()
    (entry,) = policy.compiled
    assert entry.recompiled == "requires_grad of its parameters changed" and entry.ran_compiled
    assert compiled == pytest.approx(eager, abs=1e-6)


def test_torch_alone_reuses_the_frozen_graph_on_2_9_and_recompiles_on_2_14():
    # Why the hook compiles afresh when requires_grad changes (inprocess.autocompile
    # calls.recompiled_call): torch.compile(model) alone, on 2.9, keeps running the
    # graph traced with the frozen parameters, so they get no gradients after unfreezing.
    # torch 2.14 recompiles by itself; the hook's fresh compile costs the same one compile.
    def two_phases(compiled: bool) -> list[float]:
        torch.manual_seed(0)
        model = Net()
        model.embed.requires_grad_(False)
        run = torch.compile(model, backend="aot_eager") if compiled else model
        losses = train(run, steps=3)
        model.embed.requires_grad_(True)
        return losses + train(run, steps=3, seed=1)

    eager, compiled = two_phases(False), two_phases(True)
    assert compiled[:3] == pytest.approx(eager[:3], abs=1e-6)
    reuses_frozen_graph = torch.torch_version.TorchVersion(torch.__version__) < "2.14"
    assert (compiled[4:] != pytest.approx(eager[4:], abs=1e-6)) == reuses_frozen_graph


def test_data_parallel_leaves_the_model_eager_and_points_to_one_process_per_gpu():
    # The hook's entry point as torch calls it on the model's first call (a forward of
    # DataParallel itself runs in the corpus: tests/container/corpus/data_parallel_cpu.py).
    policy = hooks()
    try:
        # Built without device placement: in a worker where the jax engine ran,
        # torchax's registered backend would be DataParallel's device.
        model = nn.DataParallel.__new__(nn.DataParallel)
        nn.Module.__init__(model)
        model.module = Net()
        policy._pre(model, (torch.randn(2, 4),))
        policy._post(model, (), None)
    finally:
        policy.end_search()
    assert policy.compiled == [] and graphs() == 0
    (warning,) = switch_report.compiled_less([_record(autocompile=policy.report())])
    assert "DataParallel" in warning and "torch_distributed" in warning


def test_more_module_classes_than_dynamos_cache_limit_all_run_compiled():
    limit = torch._dynamo.config.recompile_limit
    classes = [type(f"Model{i}", (Net,), {}) for i in range(limit + 2)]
    models = [cls() for cls in classes]
    policy = hooks()
    try:
        for _ in range(2):  # the second call of each runs compiled
            for model in models:
                model(torch.randn(2, 4)).sum().backward()
    finally:
        policy.end_search()
    assert len(policy.compiled) == limit + 2
    assert all(entry.ran_compiled for entry in policy.compiled)
    assert graphs() == limit + 2


def test_the_recompile_limit_is_reported_with_the_fix_for_a_python_attribute():
    class Scaled(Net):
        tag = "a"

        def forward(self, x):
            return super().forward(x) * len(self.tag)

    policy = hooks()
    try:
        model = Scaled()
        limit = torch._dynamo.config.recompile_limit
        for step in range(limit + 4):
            model.tag = "a" * (step + 1)  # a Python string, guarded on: one graph per value
            model(torch.randn(2, 4)).sum().backward()
    finally:
        policy.end_search()
    (entry,) = policy.compiled
    assert entry.eager_calls > 0 and not entry.ran_compiled
    assert entry.limit and entry.limit.startswith("recompile_limit")
    text = switch_report.compiled_text(
        [_record(autocompile=policy.report(), compile={"graphs": 8})], "inductor"
    )
    assert "ran eager at the end" in text
    (warning,) = switch_report.compiled_less([_record(autocompile=policy.report())])
    assert "recompile_limit" in warning and "Python value" in warning
    assert "dynamic=True does not help" in warning


def test_a_compile_that_fails_after_a_graph_break_does_not_run_the_first_part_twice():
    class BreakNet(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.norm = nn.BatchNorm1d(4)
            self.head = nn.Linear(4, 1)

        def forward(self, x):
            x = self.norm(x)  # updates the running statistics
            torch._dynamo.graph_break()
            return self.head(x)

    graphs_seen = []

    def second_graph_fails(gm, inputs):
        graphs_seen.append(gm)
        if len(graphs_seen) > 1:
            raise RuntimeError("injected backend failure")
        return gm.forward

    torch.manual_seed(0)
    reference = BreakNet()
    model = copy.deepcopy(reference)
    batches = [torch.randn(6, 4) for _ in range(2)]
    for x in batches:
        reference(x)
    policy = hooks(compile_kwargs={"backend": second_graph_fails})
    try:
        for x in batches:
            model(x)
    finally:
        policy.end_search()
    (entry,) = policy.compiled
    assert entry.failed and "injected backend failure" in entry.failed
    assert model.norm.num_batches_tracked.item() == 2
    torch.testing.assert_close(model.norm.running_mean, reference.norm.running_mean)


def test_the_model_saves_whole_loads_and_traces_after_the_hook_compiled_it(tmp_path):
    policy = hooks()
    try:
        torch.manual_seed(0)
        model = Net(layers=3)
        train(model)
    finally:
        policy.end_search()
    assert policy.compiled[0].ran_compiled
    buffer = io.BytesIO()
    torch.save(model, buffer)
    buffer.seek(0)
    loaded = torch.load(buffer, weights_only=False)
    x = torch.randn(2, 4)
    torch.testing.assert_close(loaded(x), model(x))
    assert loaded._compiled_call_impl is None
    torch.testing.assert_close(torch.jit.trace(loaded, x)(x), model(x))
    torch.testing.assert_close(torch.jit.script(loaded)(x), model(x))


def test_region_marks_stay_out_of_the_pickled_model():
    torch.manual_seed(0)
    model = Net(layers=3)
    groups = regions.mark_regions(model, torch)
    assert [group.describe() for group in groups] == ["3 x Block"]
    loaded = torch.load(_saved(model), weights_only=False)
    assert all("forward" not in vars(layer) for layer in loaded.layers)
    twin = copy.deepcopy(model)
    assert all("forward" not in vars(layer) for layer in twin.layers)
    x = torch.randn(2, 4)
    torch.testing.assert_close(loaded(x), model(x))
    torch.testing.assert_close(torch.jit.trace(loaded, x)(x), model(x))


def _saved(model: nn.Module) -> io.BytesIO:
    buffer = io.BytesIO()
    torch.save(model, buffer)
    buffer.seek(0)
    return buffer


class Adapter(nn.Module):
    """LoRA-style: a frozen base Linear and a small trainable update."""

    def __init__(self, width: int = 8) -> None:
        super().__init__()
        self.base = nn.Linear(width, width).requires_grad_(False)
        self.down = nn.Linear(width, 2, bias=False)
        self.up = nn.Linear(2, width, bias=False)

    def forward(self, x):
        return x + self.base(x) + self.up(self.down(x))


class Checkpointed(Net):
    def forward(self, x):
        from torch.utils.checkpoint import checkpoint

        x = self.embed(x)
        for layer in self.layers:
            x = checkpoint(layer, x, use_reentrant=False)
        return self.head(x)


def test_blocks_where_regions_are_known_wrong_are_not_marked():
    lora = Net()
    lora.layers = nn.ModuleList(Adapter() for _ in range(2))
    batch_norm = Net()
    batch_norm.layers = nn.ModuleList(
        [nn.Sequential(nn.BatchNorm1d(8), nn.Linear(8, 8)) for _ in range(2)]
    )
    cases = {
        "frozen parameters": lora,
        "activation checkpointing": Checkpointed(),
        "holds buffers": batch_norm,
    }
    for expected, model in cases.items():
        skipped: list[str] = []
        assert regions.mark_regions(model, torch, skipped=skipped) == []
        assert len(skipped) == 1 and expected in skipped[0], skipped
        assert all("forward" not in vars(layer) for layer in model.layers)
    assert regions.mark_regions(Net(), torch) != []  # a plain stack is still marked


@pytest.mark.slow
@pytest.mark.parametrize("pattern", ["lora", "checkpoint"])
def test_regional_true_on_known_wrong_blocks_compiles_whole_and_matches_eager(pattern):
    # The per-step losses that drifted (1.4e-2 and 5.4e-2) under torch 2.9's regions.
    def build() -> nn.Module:
        torch.manual_seed(0)
        if pattern == "checkpoint":
            return Checkpointed(layers=3)
        model = Net(layers=3)
        model.layers = nn.ModuleList(Adapter() for _ in range(3))
        return model

    eager = train(build(), steps=6)
    policy = hooks(compile_kwargs={"backend": "inductor"}, regional=True)
    try:
        compiled = train(build(), steps=6)
    finally:
        policy.end_search()
    (entry,) = policy.compiled
    assert entry.regional is None and entry.ran_compiled
    assert entry.as_dict()["regional_off"]
    assert max(abs(a - b) for a, b in zip(eager, compiled, strict=True)) <= 1e-5
