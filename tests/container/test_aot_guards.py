"""The guards an ahead-of-time artifact keeps (inprocess.aot.saved_guards), in process.

torch's default guard filter for ``aot_compile`` fails on a model whose forward is
wrapped by a decorator that reads the wrapped function's code, as transformers'
``merge_with_config_defaults`` does: the artifact could not be saved. The hook's
filter leaves that code-identity guard out (the artifact's source digests cover
it). ``aot_eager`` keeps these tests to seconds; the real jobs are in test_aot.py.
"""

from __future__ import annotations

import collections
import functools
import json
from pathlib import Path
from typing import Any

import pytest

from trcomp_container.inprocess import aot, torch_compat

torch = pytest.importorskip("torch")
needs_aot = pytest.mark.skipif(
    not aot.has_aot_compile(torch), reason=f"torch {torch.__version__} has no aot_compile"
)


def merged_with_defaults(func: Any) -> Any:
    """A wrapper that reads the wrapped function's code, as transformers' decorators do."""

    @functools.wraps(func)
    def wrapper(self: Any, *args: Any, **kwargs: Any) -> Any:
        names = func.__code__.co_varnames[2 : func.__code__.co_argcount]
        return func(self, *args, **{**dict.fromkeys(names), **kwargs})

    return wrapper


class Decorated(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.a = torch.nn.Linear(4, 2)

    @merged_with_defaults
    def forward(self, x: Any, scale: Any = None) -> Any:
        return self.a(x) * (2.0 if scale is None else scale)


def aot_compiled(compile_kwargs: dict[str, Any], model: Any, x: Any) -> Any:
    compiled = torch.compile(aot.call_forward, **compile_kwargs)
    return compiled.aot_compile(((model, x), {}))


@needs_aot
def test_torchs_own_filter_cannot_save_a_decorated_forward() -> None:
    """The torch fact behind the hook's filter (if a torch fixes it, the filter can go)."""
    with pytest.raises(Exception, match="ID_MATCH guard cannot be serialized"):
        aot_compiled({"backend": "aot_eager", "fullgraph": True}, Decorated(), torch.randn(3, 4))


@needs_aot
def test_the_hooks_filter_saves_it_and_the_loaded_artifact_guards_the_rest(
    tmp_path: Path,
) -> None:
    model, x = Decorated(), torch.randn(3, 4)
    kwargs = aot.with_guard_filter(torch, {"backend": "aot_eager", "fullgraph": True})
    fn = aot_compiled(kwargs, model, x)
    fn.save_compiled_function(str(tmp_path / "a.pt2"))
    with (tmp_path / "a.pt2").open("rb") as handle:
        loaded = torch.compiler.load_compiled_function(
            handle, f_globals=aot.call_forward.__globals__
        )
    loaded.disable_guard_check()
    assert loaded.guard_check(model, x)
    assert torch.equal(loaded(model, x), model(x))
    # The guards that are kept still refuse what the graph was not traced for.
    assert not loaded.guard_check(model, torch.randn(5, 4))
    with torch.no_grad():
        assert not loaded.guard_check(model, x)


def test_a_mode_becomes_its_options_beside_the_filter() -> None:
    """torch.compile refuses ``mode`` beside ``options``: the mode's options stand in."""
    mode = "max-autotune-no-cudagraphs"
    kwargs = aot.with_guard_filter(
        torch, {"backend": "inductor", "mode": mode, "fullgraph": True, "dynamic": False}
    )
    assert "mode" not in kwargs
    options = dict(kwargs["options"])
    assert callable(options.pop("guard_filter_fn"))
    assert options == torch._inductor.list_mode_options(mode, False) != {}
    assert kwargs["fullgraph"] is True and kwargs["dynamic"] is False
    torch.compile(aot.call_forward, **kwargs)  # accepted (compiles at the first call)

    plain = aot.with_guard_filter(torch, {"backend": "inductor"})
    assert set(plain["options"]) == {"guard_filter_fn"}


def aot_call(model: Any, directory: Path, backend: Any = "aot_eager") -> Any:
    """The hook's compiled call of ``model``; its normal path is eager here (no graphs)."""
    return aot.AotCall(
        torch,
        model,
        model.forward,
        compile_kwargs={"backend": backend},
        directory=directory,
        trcomp_version="test",
    )


@needs_aot
def test_a_failed_attempt_leaves_its_graph_uncounted(tmp_path: Path) -> None:
    """dynamo counts a graph before the backend compiles it: the job's graph count must
    not include one that failed (the summary said "1 graph" for a model that ran eager)."""

    def broken(graph: Any, example_inputs: Any) -> Any:
        raise RuntimeError("this backend does not compile")

    model, x = torch.nn.Linear(4, 2), torch.randn(3, 4)
    call = aot_call(model, tmp_path / "aot", backend=broken)
    before = torch_compat.unique_graphs()
    assert torch.equal(call(x), model(x))
    assert call.state.path == "off"
    assert "this backend does not compile" in (call.state.reason or "")
    assert call.state.discarded_graphs == torch_compat.unique_graphs() - before == 1
    assert len(list((tmp_path / "aot").glob("*.failed.json"))) == 1


class ReturnsOrderedDict(torch.nn.Module):
    """Returns what transformers' models return (``ModelOutput`` is an ``OrderedDict``)."""

    def __init__(self) -> None:
        super().__init__()
        self.a = torch.nn.Linear(4, 2)

    def forward(self, x: Any) -> Any:
        return collections.OrderedDict(y=self.a(x))


@needs_aot
def test_an_artifact_whose_code_reads_a_module_loads_in_a_new_process(tmp_path: Path) -> None:
    """dynamo's code for the output reads ``collections`` through a global it adds to the
    traced function's scope (``___module_collections_<id>_c<n>``). A new process lacks it,
    and torch refused GPT-2's artifact there: every job compiled and saved it again."""
    model, x = ReturnsOrderedDict(), torch.randn(3, 4)

    scope = aot.call_forward.__globals__
    before = set(scope)
    first = aot_call(model, tmp_path)
    first(x)
    assert first.state.path == "saved", first.state
    added = [name for name in set(scope) - before if name.startswith("___module_")]
    assert added, "dynamo no longer adds module globals: the workaround can go"
    meta = json.loads((tmp_path / f"{first.state.key}.json").read_text())
    assert {meta["modules"][name] for name in added} == {"collections"}

    for name in added:  # as in a new process
        del scope[name]
    second = aot_call(model, tmp_path)
    out = second(x)
    assert second.state.path == "loaded", second.state
    assert second.state.calls == 1
    assert torch.equal(out["y"], model(x)["y"])


@needs_aot
def test_an_artifact_compiled_while_gradients_are_held_loads(tmp_path: Path) -> None:
    """Gradients in place at the first compiled call (``zero_grad()`` after the forward,
    or accumulation): torch 2.14 saved each ``.grad`` as a placeholder that no process
    could load. They are set aside while compiling, and are the same after."""
    model, x = torch.nn.Linear(4, 2), torch.randn(3, 4)
    model(x).sum().backward()
    grads = [param.grad.clone() for param in model.parameters()]

    first = aot_call(model, tmp_path)
    first(x).sum().backward()
    assert first.state.path == "saved", first.state
    for param, grad in zip(model.parameters(), grads, strict=True):
        assert torch.equal(param.grad, 2 * grad)  # held, then accumulated into

    second = aot_call(model, tmp_path)
    assert torch.equal(second(x), model(x))
    assert second.state.path == "loaded", second.state
