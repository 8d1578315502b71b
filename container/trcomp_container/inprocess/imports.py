"""Run a callback right after a module is first imported (executed), once.

A finder first on ``sys.meta_path``: it asks the other finders for the spec and
wraps the loader's ``exec_module``. The callback is taken only when the module
is executed, so a library that merely probes for a module first
(``importlib.util.find_spec("torch")``, as ``datasets`` does) does not use it up.
Standard library only.
"""

from __future__ import annotations

import importlib.abc
import importlib.machinery
import sys
from collections.abc import Callable, Sequence
from types import ModuleType

__all__ = ["AfterImport"]


class AfterImport(importlib.abc.MetaPathFinder):
    """Calls ``callbacks[name](module)`` after module ``name`` is executed, once.

    ``run(name, callback, module)`` runs each callback (the session's no-harm boundary).
    """

    def __init__(
        self,
        callbacks: dict[str, Callable[[ModuleType], None]],
        run: Callable[[str, Callable[[ModuleType], None], ModuleType], None],
    ) -> None:
        self.callbacks = callbacks
        self._run = run

    def find_spec(
        self, fullname: str, path: Sequence[str] | None, target: ModuleType | None = None
    ) -> importlib.machinery.ModuleSpec | None:
        if fullname not in self.callbacks:
            return None
        spec = None
        for finder in sys.meta_path:
            if finder is self or not hasattr(finder, "find_spec"):
                continue
            spec = finder.find_spec(fullname, path, target)
            if spec is not None:
                break
        loader = getattr(spec, "loader", None)
        if spec is None or loader is None or not hasattr(loader, "exec_module"):
            return spec
        original = loader.exec_module

        def exec_module(module: ModuleType) -> None:
            original(module)
            callback = self.callbacks.pop(fullname, None)
            if callback is not None:
                self._run(fullname, callback, module)

        loader.exec_module = exec_module  # type: ignore[method-assign]
        return spec

    def run_imported(self) -> None:
        """Run now, in the order given, the callbacks of modules imported before the finder
        was installed (a ``.pth`` file imports torch before ``sitecustomize``; a process forked
        from one that had imported it): the callback still sees the module before the
        script does anything with it."""
        for name in list(self.callbacks):
            module = sys.modules.get(name)
            callback = self.callbacks.pop(name) if module is not None else None
            if callback is not None and module is not None:
                self._run(name, callback, module)

    def install(self) -> Callable[[], None]:
        """Put the finder first on ``sys.meta_path``; returns its removal."""
        sys.meta_path.insert(0, self)

        def remove() -> None:
            if self in sys.meta_path:
                sys.meta_path.remove(self)

        return remove
