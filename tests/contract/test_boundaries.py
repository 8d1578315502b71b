"""The SDK/container boundary: the container reaches the SDK only through trcomp.contract.

And through ``trcomp.runtime.regions``: the regional compilation the start-up
hook shares with ``trcomp.runtime.compile``, whose package loads only the
contract. Each check imports modules in a fresh interpreter whose import system
refuses (and records) the packages that side must not use, so an ``import
sagemaker`` added to a container module fails here, not only in the Docker
suite (the image leaves the SageMaker SDK out).
"""

from __future__ import annotations

import ast
import importlib.util
import json
import subprocess
import sys
from pathlib import Path

import trcomp
import trcomp_container
from trcomp_container.environment import HOOK_DIR

SDK_DIR = Path(trcomp.__file__).resolve().parent
CONTAINER_DIR = Path(trcomp_container.__file__).resolve().parent

# Allowed from the SDK package in the container: the contract and what it imports itself.
CONTRACT_MODULES = ("trcomp", "trcomp._version", "trcomp.contract")
# And the regional compilation the start-up hook shares with trcomp.runtime.compile
# (its package loads the contract only).
SHARED_RUNTIME = ("trcomp.runtime", "trcomp.runtime.regions")

# Runs in the child: refuse and record imports of BLOCKED, import MODULES (and
# the hook files), print what failed, what was refused and which trcomp modules loaded.
CHILD = r"""
import importlib, importlib.abc, importlib.util, json, sys, traceback

blocked, modules, hook_files = json.loads(sys.argv[1])
refused = []

class Refuse(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path, target=None):
        if any(name == b or name.startswith(b + ".") for b in blocked):
            refused.append(name)
            raise ImportError(f"import of {name} is not allowed on this side of the boundary")
        return None

sys.meta_path.insert(0, Refuse())
failed = {}
for name in modules:
    try:
        importlib.import_module(name)
    except BaseException:  # any way an import fails (SystemExit too) is what the check reports
        failed[name] = traceback.format_exc(limit=3)
for index, path in enumerate(hook_files):
    sys.path.insert(0, str(__import__("pathlib").Path(path).parent))
    spec = importlib.util.spec_from_file_location(f"_trcomp_hook_{index}", path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up by name
    try:
        spec.loader.exec_module(module)
    except BaseException:  # as above
        failed[path] = traceback.format_exc(limit=3)
loaded = sorted(m for m in sys.modules if m == "trcomp" or m.startswith(("trcomp.", "trcomp_")))
print(json.dumps({"failed": failed, "refused": sorted(set(refused)), "loaded": loaded}))
"""


def _run(blocked: list[str], modules: list[str], hook_files: list[str] = ()) -> dict:
    args = json.dumps([blocked, modules, list(hook_files)])
    done = subprocess.run(
        [sys.executable, "-c", CHILD, args], capture_output=True, text=True, timeout=300
    )
    assert done.returncode == 0, done.stderr[-3000:]
    result: dict = json.loads(done.stdout.strip().splitlines()[-1])
    return result


def _modules(root: Path, package: str, skip: tuple[str, ...] = ()) -> list[str]:
    names = []
    for path in sorted(root.rglob("*.py")):
        parts = list(path.relative_to(root).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts.pop()
        name = ".".join([package, *parts])
        if "hook" in parts[:1] or any(name == s or name.startswith(s + ".") for s in skip):
            continue
        names.append(name)
    return names


def _outside_contract(loaded: list[str], allowed: tuple[str, ...] = ()) -> list[str]:
    sdk_side = [m for m in loaded if m == "trcomp" or m.startswith("trcomp.")]
    return [
        m
        for m in sdk_side
        if m not in CONTRACT_MODULES + allowed and not m.startswith("trcomp.contract.")
    ]


def test_every_container_module_imports_without_the_sagemaker_sdk() -> None:
    modules = _modules(CONTAINER_DIR, "trcomp_container")
    hooks = [str(p) for p in sorted(HOOK_DIR.glob("*.py"))]
    # hook/ holds the sitecustomize shim alone; what it starts is trcomp_container.inprocess.
    assert "trcomp_container.training" in modules and len(hooks) == 1
    assert "trcomp_container.inprocess.session" in modules
    # boto3 stays allowed: the training toolkit, which the image has, needs it.
    result = _run(["sagemaker", "sagemaker_core"], modules, hooks)
    assert result["failed"] == {}
    assert result["refused"] == []
    assert _outside_contract(result["loaded"], SHARED_RUNTIME) == []


def test_the_contract_imports_without_sagemaker_torch_or_the_rest_of_trcomp() -> None:
    modules = _modules(SDK_DIR / "contract", "trcomp.contract")
    assert "trcomp.contract.runtime_config" in modules
    result = _run(["sagemaker", "sagemaker_core", "torch", "trcomp_container"], modules)
    assert result["failed"] == {}
    assert result["refused"] == []
    assert _outside_contract(result["loaded"]) == []


def test_the_runtime_helpers_import_without_torch_jax_or_the_sagemaker_sdk() -> None:
    """``trcomp.runtime`` and its ``regions`` load in a training script and in the
    start-up hook before torch does: they import the contract and nothing heavy."""
    blocked = ["sagemaker", "sagemaker_core", "torch", "jax", "torchax", "trcomp_container"]
    result = _run(blocked, list(SHARED_RUNTIME))
    assert result["failed"] == {}
    assert result["refused"] == []
    assert _outside_contract(result["loaded"], SHARED_RUNTIME) == []


# cli.__main__ runs the CLI; trcomp.v3 needs the SageMaker SDK v3, which cannot share
# this environment with v2 (the static check below reads its source all the same).
SDK_SKIP = ("trcomp.cli.__main__", "trcomp.v3")
# Modules of an optional extra, checked where the extra is installed.
NEEDS = {
    "trcomp.runtime.jax_conv": "jax",
    "trcomp.runtime.jax_engine": "jax",
    "trcomp.runtime.jax_env": "jax",
    "trcomp.runtime.jax_state": "jax",
}


def test_no_sdk_module_imports_the_container_package() -> None:
    missing = tuple(m for m, dep in NEEDS.items() if importlib.util.find_spec(dep) is None)
    modules = _modules(SDK_DIR, "trcomp", SDK_SKIP + missing)
    assert "trcomp.estimators" in modules and "trcomp.runtime" in modules
    result = _run(["trcomp_container"], modules)
    assert result["failed"] == {}
    assert result["refused"] == []
    assert not [m for m in result["loaded"] if m.startswith("trcomp_container")]


# Imports inside functions escape the import check above; this reads the source.


def _container_imports(path: Path) -> list[int]:
    lines = []
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            names = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            names = [node.module or ""]
        elif (
            isinstance(node, ast.Call)
            and getattr(node.func, "attr", getattr(node.func, "id", "")) == "import_module"
            and node.args
            and isinstance(node.args[0], ast.Constant)
        ):
            names = [str(node.args[0].value)]
        else:
            continue
        if any(n == "trcomp_container" or n.startswith("trcomp_container.") for n in names):
            lines.append(node.lineno)
    return lines


def test_no_sdk_source_imports_the_container_package() -> None:
    found = {
        str(path.relative_to(SDK_DIR)): lines
        for path in sorted(SDK_DIR.rglob("*.py"))
        if (lines := _container_imports(path))
    }
    assert found == {}
