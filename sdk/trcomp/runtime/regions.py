"""Regional compilation: a model's repeated block traced and compiled once, reused for every layer.

A transformer is mostly N copies of one block (``GPT2Block``, ``BertLayer``,
``TransformerEncoderLayer``) held in an ``nn.ModuleList`` or ``nn.Sequential``.
Compiled whole, dynamo traces and inductor compiles all N copies, so the cold
compile grows with the depth. Here each block's ``forward`` is marked as a
nested compile region (``torch.compiler.nested_compile_region``, one marked
function per block class) and the whole model is then compiled as before:
dynamo traces the block once and reuses that subgraph for every copy, and the
model stays one graph, so the steady step is the whole model's.

A block whose forward cannot be captured as one graph (a graph break, or a
side effect outside it such as transformers' KV cache object updated by each
block) makes dynamo raise ``UncapturedHigherOrderOpError``; :class:`RegionalCall`
then takes the marks off and the model is compiled whole, with the reason kept.

Regions are used only where they are known to give eager's numbers. torch 2.9's
nested compile regions gave wrong gradients under inductor for blocks with
frozen parameters (LoRA-style adapters over a frozen base) and for blocks run
under activation checkpointing, so :func:`unsafe_reason` keeps such blocks (and
blocks holding buffers, which a forward may update) out of regions: the model
is then compiled whole.

A mark never enters the module's pickled state: ``torch.save(model)`` and
``copy.deepcopy`` see the plain block (:func:`mark_regions`).

Shared by :func:`trcomp.runtime.compile` and the start-up hook's zero-code
path, which may import only the standard library, ``trcomp.contract`` and this
module: torch is never imported here (nor anything outside the standard
library); callers pass the ``torch`` module in.
"""

from __future__ import annotations

import functools
import logging
from collections.abc import Callable
from dataclasses import dataclass
from types import MethodType
from typing import Any

__all__ = [
    "MIN_BLOCKS",
    "TORCH_CHECKED",
    "BlockGroup",
    "RegionalCall",
    "compile_in_place",
    "compile_wrapped",
    "entered",
    "mark_regions",
    "repeated_blocks",
    "torch_reason",
    "unmark_regions",
    "unsafe_reason",
]

MIN_BLOCKS = 2
"""Fewer copies than this are not a repeated block: marking one block alone saves nothing."""

_REASON_CHARS = 300
_LOG = logging.getLogger("trcomp.regions")

# One marked forward per block class, so every copy calls the same region function.
_MARKED: dict[type, Callable[..., Any]] = {}


@dataclass(frozen=True)
class BlockGroup:
    """The copies of one block class found in one container of a model."""

    path: str
    """Where the container sits in the model, e.g. ``transformer.h``."""
    class_name: str
    blocks: tuple[Any, ...]

    def describe(self) -> str:
        """``"12 x GPT2Block"``."""
        return f"{len(self.blocks)} x {self.class_name}"


def repeated_blocks(module: Any, torch: Any) -> list[BlockGroup]:
    """The repeated blocks of ``module``, outermost first; empty when it has none.

    A repeated block is each child of an ``nn.ModuleList`` or ``nn.Sequential``
    whose :data:`MIN_BLOCKS` or more children all have one class, a class with
    submodules of its own (``Sequential(Linear, Linear)`` is not one). The
    search does not descend into the blocks it found.
    """
    containers = (torch.nn.ModuleList, torch.nn.Sequential)
    groups: list[BlockGroup] = []

    def visit(path: str, node: Any) -> None:
        if isinstance(node, containers):
            items = list(node.children())
            if (
                len(items) >= MIN_BLOCKS
                and all(type(item) is type(items[0]) for item in items)
                and next(iter(items[0].children()), None) is not None
            ):
                groups.append(BlockGroup(path, type(items[0]).__name__, tuple(items)))
                return
        for name, child in node.named_children():
            visit(f"{path}.{name}" if path else name, child)

    visit("", module)
    return groups


def _marked_forward(cls: Any, torch: Any) -> Callable[..., Any]:
    if cls not in _MARKED:
        _MARKED[cls] = torch.compiler.nested_compile_region(cls.forward)
    return _MARKED[cls]


def unsafe_reason(group: BlockGroup, model: Any) -> str | None:
    """Why ``group``'s blocks must not be nested compile regions; None when they may be.

    Known wrong under inductor in torch 2.9 (reproduced without trcomp): blocks
    with frozen parameters, blocks run under activation checkpointing. Blocks
    holding buffers are left out too (a forward that updates a buffer, as
    BatchNorm does, is a side effect the region would have to carry).
    """
    for block in group.blocks:
        params = list(block.parameters())
        if any(not param.requires_grad for param in params):
            return f"{group.class_name} has frozen parameters (requires_grad=False)"
        if next(iter(block.buffers()), None) is not None:
            return f"{group.class_name} holds buffers (a forward may update them)"
    for module in model.modules():
        if getattr(module, "gradient_checkpointing", False) is True:
            return f"{type(module).__name__} uses gradient checkpointing"
    for cls in {type(module) for module in model.modules()}:
        if _calls_checkpoint(cls):
            return f"{cls.__name__}.forward calls activation checkpointing"
    return None


def _calls_checkpoint(cls: type) -> bool:
    """Whether ``cls.forward``'s code names torch.utils.checkpoint's functions."""
    forward = getattr(cls, "forward", None)
    code = getattr(forward, "__code__", None)
    if code is None or "torch/nn/modules" in code.co_filename:
        return False
    # HF's `gradient_checkpointing` flags are read by unsafe_reason from the modules.
    names = set(code.co_names) | set(code.co_varnames)
    return any(
        name == "checkpoint" or name.startswith("checkpoint_") or name.endswith("_checkpoint")
        for name in names
    )


def _drop_marks(block: Any) -> dict[str, Any]:
    # Bound as the block's __getstate__ while it is marked: pickling and deepcopy
    # see the plain block (nn.Module.__getstate__ does the same for Module.compile).
    state = type(block).__getstate__(block)
    for name in _MARK_ATTRS:
        state.pop(name, None)
    return state


_MARK_ATTRS = ("forward", "__getstate__")


def mark_regions(module: Any, torch: Any, *, skipped: list[str] | None = None) -> list[BlockGroup]:
    """Mark each repeated block's forward as a nested compile region; the groups marked.

    The mark is an instance attribute ``forward``, the region with the block as its
    first argument; eager calls go straight to the class's forward. It is left out
    of the block's pickled state, so a saved or copied model is the plain one. A group whose blocks
    already carry an instance ``forward`` (another library's wrapper), or for
    which :func:`unsafe_reason` has a reason (appended to ``skipped``), is left alone.
    """
    marked = []
    for group in repeated_blocks(module, torch):
        if any("forward" in vars(block) for block in group.blocks):
            continue
        reason = unsafe_reason(group, module)
        if reason is not None:
            if skipped is not None:
                skipped.append(reason)
            continue
        region = _marked_forward(type(group.blocks[0]), torch)
        for block in group.blocks:
            # The block is the region's first argument, not a bound ``self``: torch 2.14
            # reuses the subgraph traced for the first block of a bound method (or a
            # closure) for every block, with that block's weights (wrong outputs, no
            # gradients for the others); as an argument, each block's weights are inputs.
            block.forward = functools.partial(region, block)
            object.__setattr__(block, "__getstate__", MethodType(_drop_marks, block))
        marked.append(group)
    return marked


def unmark_regions(groups: list[BlockGroup]) -> None:
    """Take the marks of :func:`mark_regions` off: each block calls its class's forward again."""
    for group in groups:
        for block in group.blocks:
            for name in _MARK_ATTRS:
                vars(block).pop(name, None)


def entered(module: Any) -> Callable[..., Any]:
    """``module``'s call (hooks included) as a plain function, for ``torch.compile``.

    ``Module.compile()`` compiles ``module._call_impl``, whose frames dynamo skips
    for modules defined in torch.nn (``TransformerEncoder``, ``Sequential``): it
    would compile nothing. This function is traced instead.
    """

    def call(*args: Any, **kwargs: Any) -> Any:
        return module._call_impl(*args, **kwargs)

    return call


class RegionalCall:
    """A compiled callable whose blocks were marked; on an uncapturable block, compiled whole.

    ``compiled`` is ``torch.compile`` of the module's call (the hook sets this
    object as the module's ``_compiled_call_impl``, as ``nn.Module.compile``
    does) or an ``OptimizedModule``'s ``forward`` (``trcomp.runtime.compile``).
    ``groups`` are the marked block groups (empty: compiled whole); ``unmarked``
    says why the marks were taken off when dynamo could not capture a block as
    one graph.
    """

    def __init__(self, compiled: Callable[..., Any], groups: list[BlockGroup], torch: Any) -> None:
        self.compiled = compiled
        self.groups = groups
        self.unmarked: str | None = None
        self._uncapturable = torch._dynamo.exc.UncapturedHigherOrderOpError

    def describe(self) -> str | None:
        """``"8 x GPT2Block"`` while regions are marked; None when compiled whole."""
        return ", ".join(group.describe() for group in self.groups) or None

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        if not self.groups:
            return self.compiled(*args, **kwargs)
        try:
            return self.compiled(*args, **kwargs)
        except self._uncapturable as exc:
            # Raised while tracing, before anything ran: compile the whole model instead.
            unmark_regions(self.groups)
            self.groups = []
            self.unmarked = " ".join(f"{type(exc).__name__}: {exc}".split())[:_REASON_CHARS]
            _LOG.warning("regional compilation off, compiling the whole model: %s", self.unmarked)
            return self.compiled(*args, **kwargs)


TORCH_CHECKED = "2.9"
"""The torch whose nested compile regions gave eager's gradients under inductor."""


def torch_reason(torch: Any, compile_kwargs: dict[str, Any]) -> str | None:
    """Why this torch compiles whole under inductor even with ``regional=True``; None if not.

    torch 2.14's nested compile regions gave wrong gradients under inductor (a stack
    of ``nn.TransformerEncoderLayer``: the forward equal to eager's, gradients 3.6e-2
    off, losses 2e-2 off by the third step), while ``aot_eager`` matched eager: the
    regions are used under inductor only on the torch where they were checked.
    """
    if compile_kwargs.get("backend", "inductor") != "inductor":
        return None
    version = torch.torch_version.TorchVersion(torch.__version__)
    if version < "2.10" and version >= TORCH_CHECKED:
        return None
    return (
        f"torch {torch.__version__}'s nested compile regions gave wrong gradients under "
        f"inductor (torch 2.14, reproduced without trcomp): regions are used on torch "
        f"{TORCH_CHECKED} only"
    )


def compile_in_place(
    module: Any,
    torch: Any,
    compile_kwargs: dict[str, Any],
    *,
    regional: bool,
    call: Callable[..., Any] | None = None,
    compile_with: dict[str, Any] | None = None,
) -> RegionalCall:
    """Mark ``module``'s repeated blocks (when ``regional``) and compile its call.

    ``call`` is the function to compile (default :func:`entered`); ``compile_with``, the
    ``torch.compile`` arguments when they are not ``compile_kwargs`` themselves (a backend
    that wraps the one ``compile_kwargs`` name). The result is
    to be set as ``module._compiled_call_impl`` (what ``nn.Module.compile``
    does), so the module keeps its class, ``state_dict`` keys and hooks.
    """
    skipped: list[str] = []
    refused = torch_reason(torch, compile_kwargs) if regional else None
    if refused is not None:
        skipped.append(refused)
    groups = mark_regions(module, torch, skipped=skipped) if regional and not refused else []
    compiled = torch.compile(call or entered(module), **(compile_with or compile_kwargs))
    result = RegionalCall(compiled, groups, torch)
    if skipped and not groups:
        result.unmarked = "; ".join(skipped)[:_REASON_CHARS]
    return result


def compile_wrapped(module: Any, torch: Any, compile_kwargs: dict[str, Any]) -> Any:
    """``torch.compile(module)`` with its repeated blocks marked: an ``OptimizedModule``.

    With blocks marked, its ``forward`` (dynamo's wrapper of the module's call)
    becomes a :class:`RegionalCall`, so an uncapturable block falls back to the
    whole model; with none, it is plain ``torch.compile(module)``.
    """
    skipped: list[str] = []
    refused = torch_reason(torch, compile_kwargs)
    groups = [] if refused else mark_regions(module, torch, skipped=skipped)
    for reason in [refused] if refused else skipped:
        _LOG.warning("regional compilation off, compiling the whole model: %s", reason)
    optimized = torch.compile(module, **compile_kwargs)
    if groups:
        optimized.forward = RegionalCall(optimized.forward, groups, torch)
    return optimized
