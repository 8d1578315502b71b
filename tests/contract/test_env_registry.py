"""The registry of environment variables (trcomp.contract.env) stays complete and single.

Two reads of the source: a ``TRCOMP_*`` name written as a string anywhere in ``sdk/`` or
``container/`` outside the registry fails (read and write names through its constants),
and a ``TRCOMP_*`` name mentioned anywhere there (code, docstrings, messages, shell
scripts) that the registry lacks fails (register it, with its writer and readers).
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

from trcomp.contract import env

REPO = Path(__file__).resolve().parents[2]
ROOTS = (REPO / "sdk", REPO / "container")
REGISTRY_FILE = REPO / "sdk" / "trcomp" / "contract" / "env.py"
NAME = re.compile(r"\bTRCOMP_[A-Z0-9_]*")
NOT_VARIABLES = {"TRCOMP_GPU_RESULT"}  # trcomp_bench's log line marker


def _python_files() -> list[Path]:
    return sorted(p for root in ROOTS for p in root.rglob("*.py") if ".venv" not in p.parts)


def _docstrings(tree: ast.AST) -> set[int]:
    found = set()
    for node in ast.walk(tree):
        body = getattr(node, "body", None)
        first = body[0] if isinstance(body, list) and body else None
        if isinstance(first, ast.Expr) and isinstance(first.value, ast.Constant):
            found.add(id(first.value))
    return found


def test_no_trcomp_name_is_written_as_a_string_outside_the_registry():
    found = []
    for path in _python_files():
        if path == REGISTRY_FILE:
            continue
        tree = ast.parse(path.read_text(), str(path))
        docstrings = _docstrings(tree)
        for node in ast.walk(tree):
            text = node.value if isinstance(node, ast.Constant) else None
            if isinstance(text, str) and id(node) not in docstrings and NAME.fullmatch(text):
                found.append(f"{path.relative_to(REPO)}:{node.lineno}: {node.value!r}")
    assert found == [], "use the constants of trcomp.contract.env:\n" + "\n".join(found)


def test_every_trcomp_name_mentioned_in_sdk_and_container_is_registered():
    files = [*_python_files(), *(p for root in ROOTS for p in root.rglob("*.sh"))]
    files += [p for p in (REPO / "container").glob("Dockerfile*")]
    unknown = []
    for path in files:
        for number, line in enumerate(path.read_text().splitlines(), 1):
            for name in NAME.findall(line):
                if name.rstrip("_") + "_" == env.PREFIX or name in NOT_VARIABLES:
                    continue
                if env.lookup(name) is None and env.lookup(name.rstrip("_")) is None:
                    unknown.append(f"{path.relative_to(REPO)}:{number}: {name}")
    assert unknown == [], "register these in trcomp.contract.env:\n" + "\n".join(unknown)


def test_every_entry_names_its_writer_readers_and_handoff():
    processes = {"user", "sdk", "entrypoint", "hook", "script", "build", "bench"}
    names = [v.name for v in env.REGISTRY]
    assert len(names) == len(set(names))
    for entry in env.REGISTRY:
        assert entry.name.startswith(env.PREFIX) and entry.doc
        assert entry.writer in processes and set(entry.readers) <= processes, entry
        # A secret reaches a training process only through the hook's Redis handoff.
        assert not entry.secret or entry.handoff == "redis", entry
        # What the training processes get is read there.
        if entry.handoff != "no":
            assert {"hook", "script"} & set(entry.readers), entry


def test_the_training_processes_get_the_platforms_variables_and_the_allow_listed_ones():
    given = {
        "PATH": "/usr/bin",
        "SM_MODEL_DIR": "/opt/ml/model",
        "MY_SETTING": "mine",
        env.KEY_ENV: "k" * 32,
        env.PREVIOUS_KEY_ENV: "p" * 32,
        env.REDIS_PASSWORD_ENV: "pw",
        env.KEY_SECRET_ENV: "arn:aws:secretsmanager:us-east-1:1:secret:k",
        env.COMPILE_TURNS_ENV: "0",
        env.CACHE_DIR_ENV: "/elsewhere",
        "TRCOMP_SHARED_CACHE_KEYS": "near name",
        "TORCHINDUCTOR_FX_GRAPH_REMOTE_CACHE": "1",
        "TORCHINDUCTOR_CACHE_DIR": "/cache",
    }
    kept, noted = env.for_training(given, drop_torch_remote_cache=True)
    assert kept == {
        "PATH": "/usr/bin",
        "SM_MODEL_DIR": "/opt/ml/model",
        "MY_SETTING": "mine",
        env.COMPILE_TURNS_ENV: "0",
        "TORCHINDUCTOR_CACHE_DIR": "/cache",
    }
    assert noted == ["TORCHINDUCTOR_FX_GRAPH_REMOTE_CACHE", "TRCOMP_SHARED_CACHE_KEYS"]
    kept, _ = env.for_training(given, drop_torch_remote_cache=False)
    assert kept["TORCHINDUCTOR_FX_GRAPH_REMOTE_CACHE"] == "1"
    assert {env.KEY_ENV, env.PREVIOUS_KEY_ENV, env.REDIS_PASSWORD_ENV} == env.SECRET_NAMES
    assert not set(env.without_secrets(given)) & env.SECRET_NAMES
