"""Inductor's settings for the job: the config's ``inductor_options`` and the header folder."""

from __future__ import annotations

import os
from collections.abc import Callable
from types import ModuleType
from typing import Any

from trcomp_container.inprocess import torch_compat

__all__ = ["apply_options", "move_header_dir"]


def apply_options(options: dict[str, Any], warn: Callable[[str], None]) -> Callable[[], None]:
    """Apply the config's inductor options one by one; returns their undo.

    One by one: an option this torch refuses is reported, and the others still apply.
    """
    config = torch_compat.inductor_config()
    entered: list[Any] = []
    for key, value in options.items():
        patch = config.patch({key: value})
        try:
            patch.__enter__()
        except (AttributeError, KeyError, TypeError, ValueError, AssertionError) as exc:
            warn(f"inductor option {key}={value!r} was not applied: {exc}")
            continue
        entered.append(patch)

    def undo() -> None:
        for patch in reversed(entered):
            patch.__exit__(None, None, None)

    return undo


def move_header_dir(codecache: ModuleType, cache_dir: str) -> Callable[[], None] | None:
    """Inductor's precompiled headers into the job's cache directory; None when torch has no
    such setting.

    Inductor keeps them under ``$TMPDIR/torchinductor_<user>`` whatever
    ``TORCHINDUCTOR_CACHE_DIR`` says.
    """
    header, lock = torch_compat.CODECACHE_HEADER_NAMES
    if not hasattr(codecache, header):
        return None
    before = {name: getattr(codecache, name, None) for name in (header, lock)}
    headers = os.path.join(cache_dir, "precompiled_headers")
    setattr(codecache, header, headers)
    setattr(codecache, lock, os.path.join(headers, "locks"))

    def undo() -> None:
        for name, value in before.items():
            setattr(codecache, name, value)

    return undo
