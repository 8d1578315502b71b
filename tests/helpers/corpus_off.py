"""The corpus's stored compiler-off results: read by the corpus test, written by one command.

Each corpus script (tests/container/corpus/) runs once with the compiler off to
give the losses and checked values the default switch's run must match. The
off run is plain eager PyTorch: its result changes only with the script, its
helper (corpus_report.py), torch, Python and, for the Hugging Face scripts,
transformers and accelerate. So it is run once and stored, per torch version,
in ``tests/container/corpus_off/torch-<version>.json``; ``make test`` runs only
the compiled side.

An entry is used only while its key still matches: the sha256 of the script and
of corpus_report.py, and the versions it was made with (:func:`environment`).
A script without a matching entry (a new script, an edited one, a new
transformers) is run off live as before, so the comparison never uses a stale
reference; ``test_the_stored_compiler_off_results_are_current`` fails on an
entry that a changed script left stale or a script with none, naming this
command:

    make corpus-off                              # every script, then commit the file
    make corpus-off CORPUS_OFF=new_script.py     # one script, the rest kept

(``python -m tests.helpers.corpus_off [script.py ...]``.) A torch version with
no stored file (make test-214's 2.14) runs every off run live.
"""

from __future__ import annotations

import argparse
import hashlib
import importlib.metadata
import json
import sys
import tempfile
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[2]
CORPUS = REPO / "tests" / "container" / "corpus"
STORED = REPO / "tests" / "container" / "corpus_off"
HELPER = "corpus_report.py"
ABOUT = (
    "compiler-off results of tests/container/corpus, made by make corpus-off "
    "(tests/helpers/corpus_off.py); tests/container/test_corpus.py uses an entry while "
    "its sha256 and environment match"
)


def _version(package: str) -> str | None:
    try:
        return importlib.metadata.version(package)
    except importlib.metadata.PackageNotFoundError:
        return None


def torch_version() -> str:
    return (_version("torch") or "none").split("+")[0]


def stored_path(torch: str | None = None) -> Path:
    return STORED / f"torch-{torch or torch_version()}.json"


def script_key(script: str) -> str:
    """sha256 of the script's text and of the helper every script imports."""
    digest = hashlib.sha256()
    for name in (script, HELPER):
        digest.update(name.encode() + b"\0" + (CORPUS / name).read_bytes() + b"\0")
    return digest.hexdigest()


def environment(script: str) -> dict[str, str | None]:
    """The versions the script's eager result depends on (beyond its own text)."""
    env = {
        "torch": torch_version(),
        "python": ".".join(map(str, sys.version_info[:2])),
    }
    text = (CORPUS / script).read_text()
    if "transformers" in text or "accelerate" in text:
        env["transformers"] = _version("transformers")
        env["accelerate"] = _version("accelerate")
    return env


def load(torch: str | None = None) -> dict[str, Any]:
    """The stored file's entries by script (empty when there is none for this torch)."""
    path = stored_path(torch)
    if not path.exists():
        return {}
    return dict(json.loads(path.read_text())["scripts"])


def usable(script: str, entries: dict[str, Any]) -> dict[str, Any] | None:
    """The stored off report of ``script`` when its key and environment still match."""
    entry = entries.get(script)
    if entry is None or entry["sha256"] != script_key(script):
        return None
    if entry["environment"] != environment(script):
        return None
    report: dict[str, Any] = entry["report"]
    return report


def stale(scripts: list[str], entries: dict[str, Any]) -> list[str]:
    """Why the stored file does not match ``scripts`` (empty: current)."""
    problems = []
    for script in scripts:
        entry = entries.get(script)
        if entry is None:
            problems.append(f"{script}: no stored off result")
        elif entry["sha256"] != script_key(script):
            problems.append(f"{script}: changed since its off result was stored")
    problems += [
        f"{name}: stored, but no such corpus script" for name in entries.keys() - set(scripts)
    ]
    return problems


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tests.helpers.corpus_off")
    parser.add_argument("scripts", nargs="*", help="only these (default: every script)")
    parser.add_argument("-j", "--jobs", type=int, default=2, help="off runs at once")
    opts = parser.parse_args(argv)

    from tests.container import test_corpus as corpus  # the harness: one way to run a script

    every = corpus.ALL_SCRIPTS
    chosen = opts.scripts or every
    unknown = sorted(set(chosen) - set(every))
    if unknown:
        parser.error(f"no such corpus script: {unknown}")
    entries = {k: v for k, v in load().items() if k in every}
    failed = []
    with tempfile.TemporaryDirectory(prefix="corpus-off-") as scratch:
        root = Path(scratch)
        pending = list(chosen)
        while pending:
            batch, pending = pending[: opts.jobs], pending[opts.jobs :]
            started = [
                (s, corpus.start(root / s.removesuffix(".py"), s, corpus.OFF, root / "cache"))
                for s in batch
            ]
            for script, child in started:
                run = corpus.finish(child)
                if run.returncode != 0 or not run.report:
                    failed.append(script)
                    print(f"{script}: FAILED with the compiler off\n{run.output[-3000:]}")
                    continue
                entries[script] = {
                    "sha256": script_key(script),
                    "environment": environment(script),
                    "wall_s": round(run.wall_s, 1),
                    "report": run.report,
                }
                print(f"{script}: stored ({run.wall_s:.0f} s)")
    path = stored_path()
    path.parent.mkdir(parents=True, exist_ok=True)
    # One script a line: a regenerated script's change is one line of the diff.
    lines = [
        "{",
        f' "about": {json.dumps(ABOUT)},',
        f' "torch": {json.dumps(torch_version())},',
        ' "scripts": {',
        ",\n".join(f"  {json.dumps(k)}: {json.dumps(v)}" for k, v in sorted(entries.items())),
        " }",
        "}",
    ]
    path.write_text("\n".join(lines) + "\n")
    print(f"wrote {path.relative_to(REPO)}: {len(entries)} scripts")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
