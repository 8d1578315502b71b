"""Regional compilation: compile a model's repeated block once and reuse it for every layer.

A transformer is mostly N copies of one block (``GPT2Block``, ``BertLayer``,
``TransformerEncoderLayer``) held in an ``nn.ModuleList`` or ``nn.Sequential``.
Compiling the whole model traces and compiles all N copies; compiling each
block in place instead lets dynamo compile the first one and reuse that code
for the others (its cache is keyed by the code it traced, and its guards check
the block's structure, not its identity), so the cold compile no longer grows
with the number of layers. The rest of the model (embeddings, final norm,
head) runs eager.

Shared by :func:`trcomp.runtime.compile` and the start-up hook's zero-code
path, which may import only the standard library and ``trcomp.contract``:
torch is never imported here; callers pass the ``torch`` module in.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass
from types import CodeType
from typing import Any

__all__ = ["MIN_BLOCKS", "BlockGroup", "compile_regions", "entered", "repeated_blocks"]

MIN_BLOCKS = 2
"""Fewer copies than this are not a repeated block: compiling one block alone saves nothing."""

# One code object per block group: dynamo keeps its compiled entries (and counts
# recompiles against its limit) per code object, so the blocks of one group share
# their compiled code and one group's variants never use up another group's limit.
_CODES: dict[tuple[str, str], CodeType] = {}


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


def entered(module: Any, group: BlockGroup | None = None) -> Callable[..., Any]:
    """``module``'s call (hooks included) as a plain function, for ``torch.compile``.

    ``Module.compile()`` compiles ``module._call_impl``, whose frames dynamo skips
    for modules defined in torch.nn (``TransformerEncoderLayer``, ``Sequential``):
    it would compile nothing. This function is traced instead. With ``group``,
    every block of that group gets a function with the same code object, so they
    share one dynamo cache.
    """

    def call(*args: Any, **kwargs: Any) -> Any:
        return module._call_impl(*args, **kwargs)

    if group is not None:
        key = (group.path, group.class_name)
        if key not in _CODES:
            name = re.sub(r"\W", "_", f"trcomp_region_{group.class_name}")
            _CODES[key] = call.__code__.replace(co_name=name)
        call.__code__ = _CODES[key]
    return call


def compile_regions(
    module: Any,
    torch: Any,
    compile_kwargs: dict[str, Any],
    *,
    wrap: Callable[[Any, Callable[..., Any]], Callable[..., Any]] | None = None,
) -> list[BlockGroup]:
    """Compile each repeated block of ``module`` in place; the groups compiled (empty: none).

    Each block's ``_compiled_call_impl`` is set, as ``nn.Module.compile`` does, so
    the model keeps its class, its state_dict keys and its hooks. ``wrap(block,
    compiled)`` may wrap each compiled callable (the hook's eager fallback).
    With no repeated block nothing is changed: the caller compiles the whole model.
    """
    groups = repeated_blocks(module, torch)
    for group in groups:
        for block in group.blocks:
            compiled = torch.compile(entered(block, group), **compile_kwargs)
            block._compiled_call_impl = compiled if wrap is None else wrap(block, compiled)
    return groups
