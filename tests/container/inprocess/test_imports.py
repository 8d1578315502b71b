"""The import finder: a callback after a module's first import, or at once for a module
imported before the finder (a ``.pth`` file's import; a process forked from one that had
imported torch, as the corpus's zygote does, tests/helpers/zygote.py)."""

from __future__ import annotations

import sys
from collections.abc import Iterator
from pathlib import Path
from types import ModuleType

import pytest

from trcomp_container.inprocess.imports import AfterImport


@pytest.fixture
def modules(tmp_path: Path) -> Iterator[list[str]]:
    """Three fresh modules on sys.path: ``trcomp_probe_a``, ``_b`` and ``_c``."""
    names = [f"trcomp_probe_{letter}" for letter in "abc"]
    for name in names:
        (tmp_path / f"{name}.py").write_text("VALUE = 1\n")
    sys.path.insert(0, str(tmp_path))
    yield names
    sys.path.remove(str(tmp_path))
    for name in names:
        sys.modules.pop(name, None)


def test_modules_imported_before_get_their_callbacks_at_once_in_order_and_once(
    modules: list[str],
) -> None:
    first, second, later = modules
    __import__(second)
    __import__(first)
    seen: list[str] = []
    finder = AfterImport(
        {name: (lambda module: seen.append(module.__name__)) for name in modules},
        lambda name, callback, module: callback(module),
    )
    remove = finder.install()
    try:
        assert seen == []  # installing alone runs nothing
        finder.run_imported()
        assert seen == [first, second]  # the callbacks' order, not the imports'
        __import__(later)
        assert seen == [first, second, later]
        finder.run_imported()
        __import__(first)
        assert seen == [first, second, later]  # once each
    finally:
        remove()


def test_a_module_not_imported_yet_keeps_its_callback_for_its_import(modules: list[str]) -> None:
    name = modules[0]
    got: list[ModuleType] = []
    finder = AfterImport({name: got.append}, lambda _name, callback, module: callback(module))
    remove = finder.install()
    try:
        finder.run_imported()
        assert got == []
        module = __import__(name)
        assert got == [module] and module.VALUE == 1
    finally:
        remove()
