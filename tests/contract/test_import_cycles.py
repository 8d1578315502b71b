"""No two modules of the tree import each other, directly or round a longer circle.

A circle of module-level imports works only while every module in it reads the
others' names after they are defined, so the order the modules happen to be
imported in decides whether it works: a moved import, or a new entry point,
then fails with a partly initialised module. This reads the source (``ast``):
the imports a module runs when it is imported, that is at its top level and in
the ``if``/``try``/``with``/``class`` blocks there. Left out: imports inside
functions (run later, when every module is whole) and under
``if TYPE_CHECKING:`` (never run). ``from package import name`` counts as an
import of ``package.name`` when that is a module of the tree, else of
``package``. The packages above an imported module are not counted: a
package whose ``__init__`` imports its own modules is the usual layout, and
Python has the package in ``sys.modules`` before it runs them.

The start-up hook's modules (``trcomp_container/hook/*.py``) are top-level
modules in the user's process (the hook's folder is on ``PYTHONPATH``), and
are read under those names.
"""

from __future__ import annotations

import ast
from collections.abc import Iterator
from pathlib import Path

import trcomp
import trcomp_bench
import trcomp_container

SDK_DIR = Path(trcomp.__file__).resolve().parent
BENCH_DIR = Path(trcomp_bench.__file__).resolve().parent
CONTAINER_DIR = Path(trcomp_container.__file__).resolve().parent
HOOK_DIR = CONTAINER_DIR / "hook"
# try/except* (ast.TryStar) is Python 3.11's.
_TRY = (ast.Try, getattr(ast, "TryStar", ast.Try))


def tree_modules() -> dict[str, tuple[Path, bool]]:
    """Every module of the tree: its name, its file, and whether it is a package."""
    found: dict[str, tuple[Path, bool]] = {}
    for root, package in ((SDK_DIR, "trcomp"), (BENCH_DIR, "trcomp_bench")):
        _add_package(found, root, package)
    _add_package(found, CONTAINER_DIR, "trcomp_container", skip=HOOK_DIR)
    for path in sorted(HOOK_DIR.glob("*.py")):
        found[path.stem] = (path, False)
    return found


def _add_package(
    found: dict[str, tuple[Path, bool]], root: Path, package: str, skip: Path | None = None
) -> None:
    for path in sorted(root.rglob("*.py")):
        if skip is not None and path.is_relative_to(skip):
            continue
        parts = [package, *path.relative_to(root).with_suffix("").parts]
        is_package = parts[-1] == "__init__"
        if is_package:
            parts.pop()
        found[".".join(parts)] = (path, is_package)


def _is_type_checking(test: ast.expr) -> bool:
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING"
    )


def _run_at_import(body: list[ast.stmt]) -> Iterator[ast.Import | ast.ImportFrom]:
    """The import statements of ``body`` that run when the module is imported."""
    for node in body:
        if isinstance(node, (ast.Import, ast.ImportFrom)):
            yield node
        elif isinstance(node, ast.If):
            if not _is_type_checking(node.test):
                yield from _run_at_import(node.body)
            yield from _run_at_import(node.orelse)
        elif isinstance(node, _TRY):
            for block in (node.body, node.orelse, node.finalbody):
                yield from _run_at_import(block)
            for handler in node.handlers:
                yield from _run_at_import(handler.body)
        elif isinstance(node, (ast.With, ast.ClassDef)):
            yield from _run_at_import(node.body)


def imported_modules(
    name: str, path: Path, is_package: bool, modules: dict[str, tuple[Path, bool]]
) -> set[str]:
    """The modules of the tree that ``name`` imports at module level."""
    targets: set[str] = set()
    for node in _run_at_import(ast.parse(path.read_text(), str(path)).body):
        if isinstance(node, ast.Import):
            targets.update(alias.name for alias in node.names)
            continue
        base = node.module or ""
        if node.level:
            package = name if is_package else name.rpartition(".")[0]
            anchor = package.split(".")[: len(package.split(".")) - (node.level - 1)]
            base = ".".join([*anchor, *filter(None, [base])])
        for alias in node.names:
            # `from package import name`: the submodule when there is one, else the package.
            submodule = f"{base}.{alias.name}"
            targets.add(submodule if submodule in modules else base)
    return {target for target in targets if target in modules and target != name}


def import_graph() -> dict[str, set[str]]:
    modules = tree_modules()
    return {
        name: imported_modules(name, path, is_package, modules)
        for name, (path, is_package) in modules.items()
    }


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """One circle of imports in each strongly connected group of modules (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    groups: list[list[str]] = []

    def visit(start: str) -> None:
        # Iterative, so a long chain of imports cannot reach the recursion limit.
        work = [(start, iter(sorted(graph[start])))]
        index[start] = low[start] = len(index)
        stack.append(start)
        on_stack.add(start)
        while work:
            node, edges = work[-1]
            for target in edges:
                if target not in index:
                    index[target] = low[target] = len(index)
                    stack.append(target)
                    on_stack.add(target)
                    work.append((target, iter(sorted(graph[target]))))
                    break
                if target in on_stack:
                    low[node] = min(low[node], index[target])
            else:
                work.pop()
                if work:
                    low[work[-1][0]] = min(low[work[-1][0]], low[node])
                if low[node] == index[node]:
                    group = []
                    while True:
                        member = stack.pop()
                        on_stack.discard(member)
                        group.append(member)
                        if member == node:
                            break
                    if len(group) > 1:
                        groups.append(sorted(group))

    for name in sorted(graph):
        if name not in index:
            visit(name)
    return [_circle(graph, group) for group in sorted(groups)]


def _circle(graph: dict[str, set[str]], group: list[str]) -> list[str]:
    """A shortest circle through the group's first module, as ``[a, b, ..., a]``."""
    members, start = set(group), group[0]
    paths = {start: [start]}
    frontier = [start]
    while frontier:
        following = []
        for node in frontier:
            for target in sorted(graph[node] & members):
                if target == start:
                    return [*paths[node], start]
                if target not in paths:
                    paths[target] = [*paths[node], target]
                    following.append(target)
        frontier = following
    raise AssertionError(f"{group} is not a strongly connected group")


def test_the_reader_resolves_submodules_relative_imports_and_type_checking(tmp_path) -> None:
    source = tmp_path / "mod.py"
    source.write_text(
        "from typing import TYPE_CHECKING\n"
        "import os, pkg.a\n"
        "from pkg import b, CONSTANT\n"
        "from . import c\n"
        "from .sub import thing\n"
        "try:\n    import pkg.d\nexcept ImportError:\n    pass\n"
        "if TYPE_CHECKING:\n    import pkg.e\n"
        "def later():\n    import pkg.f\n"
    )
    modules = {name: (source, False) for name in ("pkg", "pkg.mod", "pkg.sub")}
    modules.update({f"pkg.{name}": (source, False) for name in "abcdef"})
    found = imported_modules("pkg.mod", source, False, modules)
    assert found == {"pkg", "pkg.a", "pkg.b", "pkg.c", "pkg.sub", "pkg.d"}
    graph = import_graph()
    # `from trcomp_container.caching import job_setup, lineage` names two modules.
    assert {"trcomp_container.caching.job_setup", "trcomp_container.caching.lineage"} <= graph[
        "trcomp_container.training"
    ]
    assert "sitecustomize" in graph  # the hook's modules, under their top-level names


def test_cycles_names_one_circle_per_group() -> None:
    assert cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c", "a"]]
    assert cycles({"a": {"b"}, "b": {"a"}, "c": {"d"}, "d": {"c"}}) == [
        ["a", "b", "a"],
        ["c", "d", "c"],
    ]
    assert cycles({"a": {"b"}, "b": set()}) == []


def test_no_module_level_import_cycle() -> None:
    found = cycles(import_graph())
    assert found == [], "module-level import cycles:\n" + "\n".join(
        " -> ".join(circle) for circle in found
    )
