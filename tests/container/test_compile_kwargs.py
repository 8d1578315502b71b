"""runtime.compile's torch.compile arguments: mode and inductor_options together."""

from __future__ import annotations

from trcomp.runtime import compile_kwargs


def test_only_changed_fields_are_passed() -> None:
    assert compile_kwargs({"mode": "default"}) == {"backend": "inductor"}
    assert compile_kwargs({"mode": "max-autotune", "fullgraph": True, "dynamic": False}) == {
        "backend": "inductor",
        "mode": "max-autotune",
        "fullgraph": True,
        "dynamic": False,
    }


def test_mode_with_options_keeps_what_the_mode_means() -> None:
    # torch.compile refuses mode and options together: the mode becomes its options.
    kwargs = compile_kwargs(
        {"mode": "reduce-overhead", "inductor_options": {"epilogue_fusion": False}}
    )
    assert kwargs == {
        "backend": "inductor",
        "options": {"triton.cudagraphs": True, "epilogue_fusion": False},
    }


def test_the_users_options_win_over_the_modes() -> None:
    kwargs = compile_kwargs(
        {"mode": "max-autotune", "inductor_options": {"triton.cudagraphs": False}}
    )
    assert kwargs["options"]["triton.cudagraphs"] is False
    assert kwargs["options"]["max_autotune"] is True
    assert "mode" not in kwargs


def test_compiling_with_both_is_accepted_by_torch() -> None:
    import torch

    kwargs = compile_kwargs(
        {"mode": "reduce-overhead", "inductor_options": {"epilogue_fusion": False}}
    )
    compiled = torch.compile(torch.nn.Linear(2, 2), **kwargs)  # no "mode and options" error
    assert type(compiled).__name__ == "OptimizedModule"
