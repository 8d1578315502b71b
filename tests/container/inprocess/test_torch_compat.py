"""Every torch private name the in-process package uses, pinned against the installed torch.

One test per function of ``trcomp_container.inprocess.torch_compat``: a torch
release that renames or changes one fails here (``make test`` on torch 2.9,
``make test-214`` on 2.14), not in a user's job.
"""

from __future__ import annotations

import pytest

from trcomp_container.inprocess import torch_compat
from trcomp_container.inprocess.aot import has_aot_compile

torch = pytest.importorskip("torch")
nn = torch.nn


def test_dynamo_counts_graphs_and_graph_breaks():
    def broken(x):
        x = x + 1
        torch._dynamo.graph_break()
        return x * 2

    before = torch_compat.unique_graphs()
    breaks = sum(torch_compat.graph_break_counts().values())
    torch.compile(broken, backend="eager")(torch.zeros(2))
    assert torch_compat.unique_graphs() == before + 2
    assert sum(torch_compat.graph_break_counts().values()) == breaks + 1
    cache = torch_compat.inductor_cache_counts()
    assert cache is not None and set(cache) == {
        "fxgraph_hit",
        "fxgraph_miss",
        "aotautograd_hit",
        "aotautograd_miss",
    }
    assert isinstance(torch_compat.compile_times_text(), str)


def test_compile_callbacks_start_and_end_once_per_compile_and_go_away():
    seen: list[str] = []
    remove = torch_compat.register_compile_callbacks(
        lambda args: seen.append("start"), lambda args: seen.append("end")
    )
    try:
        torch.compile(lambda x: x - 3, backend="eager")(torch.zeros(2))
    finally:
        remove()
    assert seen == ["start", "end"]
    torch.compile(lambda x: x - 4, backend="eager")(torch.zeros(2))
    assert seen == ["start", "end"]


def test_configs_have_the_settings_the_package_changes():
    dynamo = torch_compat.dynamo_config()
    assert isinstance(dynamo.reorderable_logging_functions, set)
    assert callable(dynamo.patch)
    inductor = torch_compat.inductor_config()
    with inductor.patch({"fallback_random": True}):
        assert inductor.fallback_random is True
    assert inductor.fallback_random is False
    options = torch_compat.list_mode_options("max-autotune", None)
    assert options.get("max_autotune") is True


@pytest.mark.skipif(not has_aot_compile(torch), reason="no aot_compile on this torch")
def test_guard_kinds_an_artifact_cannot_save_are_listed():
    assert "ID_MATCH" in torch_compat.unsupported_serialization_guards()


def test_the_graph_task_is_known_inside_backward_only():
    inside: list[int] = []
    x = torch.ones(2, requires_grad=True)
    y = x * 2
    y.register_hook(lambda grad: inside.append(torch_compat.current_graph_task_id()) or grad)
    assert torch_compat.current_graph_task_id() == -1
    y.sum().backward()
    assert inside and inside[0] != -1


def test_compiled_modules_and_compile_errors_are_recognised():
    model = nn.Linear(2, 2)
    optimized = torch_compat.optimized_module_class()
    assert optimized is not None and isinstance(torch.compile(model), optimized)
    assert issubclass(torch_compat.dynamo_exception(), Exception)

    def failing(gm, inputs):
        raise RuntimeError("backend refused")

    with pytest.raises(torch_compat.dynamo_exception()):
        torch.compile(lambda x: x + 5, backend=failing)(torch.zeros(1))


def test_a_modules_compiled_call_is_where_module_compile_puts_it():
    model = nn.Linear(2, 2)
    assert torch_compat.compiled_call_impl(model) is None
    model.compile(backend="eager")
    assert torch_compat.compiled_call_impl(model) is not None
    calls: list[int] = []
    torch_compat.set_compiled_call_impl(model, lambda *a, **k: calls.append(1) or a[0])
    model(torch.zeros(1, 2))
    assert calls == [1]
    torch_compat.set_compiled_call_impl(model, None)
    assert model(torch.zeros(1, 2)).shape == (1, 2) and calls == [1]
    # On torch.compile's wrapper too (the check of a trcomp.runtime.compile model): kept on
    # the wrapper itself, not forwarded to the module it wraps.
    optimized = torch.compile(nn.Linear(2, 2), backend="eager")
    torch_compat.set_compiled_call_impl(optimized, lambda *a, **k: calls.append(2) or a[0])
    optimized(torch.zeros(1, 2))
    assert calls == [1, 2] and torch_compat.compiled_call_impl(optimized._orig_mod) is None


def test_a_compiled_regions_backward_node_has_the_name_the_package_looks_for():
    from trcomp_container.inprocess.compiled import went_through_compiled

    model = nn.Linear(2, 2)
    out = torch.compile(model, backend="aot_eager")(torch.ones(1, 2))
    name = torch_compat.COMPILED_BACKWARD_NODE
    assert name in type(out.grad_fn).__name__
    assert went_through_compiled(out, name) is True
    assert went_through_compiled(model(torch.ones(1, 2)), name) is False
    with torch.no_grad():
        assert went_through_compiled(model(torch.ones(1, 2)), name) is None


def test_module_hooks_are_found():
    model = nn.Linear(2, 2)
    assert not torch_compat.has_module_hooks(model)
    model.register_forward_hook(lambda *args: None)
    assert torch_compat.has_module_hooks(model)


def test_inductors_redis_backend_and_header_folder_are_where_the_patches_expect():
    import torch._inductor.codecache as codecache
    import torch._inductor.remote_cache as remote_cache

    assert torch_compat.redis_backend_class(remote_cache) is not None
    assert all(hasattr(codecache, name) for name in torch_compat.CODECACHE_HEADER_NAMES)


def test_the_remote_cache_flags_are_config_entries_of_their_modules():
    import importlib

    for module_name, flag in torch_compat.REMOTE_CACHE_FLAGS.values():
        module = importlib.import_module(module_name)
        before = getattr(module, flag)  # a config entry (None, True or False) of that module
        assert before in (None, True, False), (module_name, flag, before)
    undo = torch_compat.set_remote_cache_flags("torch._inductor.config", ("fx_graph",))
    import torch._inductor.config as inductor_config
    from torch._inductor.utils import should_use_remote_fx_graph_cache

    assert inductor_config.fx_graph_remote_cache is True and should_use_remote_fx_graph_cache()
    undo()
    assert not should_use_remote_fx_graph_cache()


def test_the_default_store_of_a_process_group(tmp_path):
    import torch.distributed as dist

    assert torch_compat.c10d_store() is None
    dist.init_process_group("gloo", init_method=f"file://{tmp_path / 'rdv'}", rank=0, world_size=1)
    try:
        store = torch_compat.c10d_store()
        store.set("trcomp/pin", "1")
        assert store.get("trcomp/pin") == b"1"
    finally:
        dist.destroy_process_group()


def test_the_backend_torch_compile_would_use_and_the_lazy_backward_compile_time():
    # The graph check wraps the backend torch.compile builds for "inductor" with its mode.
    inductor = torch_compat.backend_of(torch, "inductor", "max-autotune-no-cudagraphs", None, None)
    assert type(inductor).__name__ == "_TorchCompileInductorWrapper"
    assert torch_compat.backend_of(torch, "aot_eager", None, None, None) is not None
    custom = lambda gm, example_inputs: gm  # noqa: E731
    assert torch_compat.backend_of(torch, custom, None, None, None) is custom
    torch._dynamo.reset()
    before = torch_compat.backward_compile_seconds()
    compiled = torch.compile(nn.Sequential(nn.Linear(2, 2), nn.Tanh()), backend="inductor")
    # No cache: a hit loads the backward with the forward, and compiles nothing later.
    with (
        torch._inductor.config.patch(fx_graph_cache=False),
        torch._functorch.config.patch(enable_autograd_cache=False),
    ):
        compiled(torch.ones(1, 2)).sum().backward()  # compiles its backward lazily, here
    assert torch_compat.backward_compile_seconds() > before
    torch._dynamo.reset()


def test_a_backward_says_whether_it_keeps_its_graph():
    seen = []
    x = torch.ones(2, requires_grad=True)
    y = (x * 2).sum()
    y.register_hook(lambda g: seen.append(torch_compat.current_graph_task_keeps_graph()) or g)
    y.backward(retain_graph=True)
    y.backward()
    assert seen == [True, False]
