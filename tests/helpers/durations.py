"""Per-test durations of every pytest run, and the command that reads them.

The plugin (loaded by tests/conftest.py) writes one JSON file when a run ends:
every test's node id, outcome, markers and the seconds of its setup, call and
teardown, with the commit, the arguments, the worker count and the run's wall
time. Under pytest-xdist only the controller writes it (it receives every
worker's reports). The file is ``build/test-durations.json``;
``TRCOMP_TEST_DURATIONS=<path>`` writes it elsewhere and ``=off`` not at all.

A *full* run (``make test``: no file or ``-k``/``-m`` narrowing beyond the
configured default) is also copied to ``build/test-durations-full.json``;
``make timings-save`` copies that file into ``docs/timings/`` with its commit,
the repository's record of the latest full run.

Reading one::

    python -m tests.helpers.durations                    # build/test-durations.json
    python -m tests.helpers.durations docs/timings/make-test-durations.json -n 40
    python -m tests.helpers.durations A.json --compare B.json   # per-file before/after
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from collections import defaultdict
from pathlib import Path
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parents[2]
DEFAULT = ROOT / "build" / "test-durations.json"
FULL = ROOT / "build" / "test-durations-full.json"
ENV = "TRCOMP_TEST_DURATIONS"
MARKS = "trcomp_marks"
NOTED = frozenset({"slow", "cold_compile", "container", "upstream"})


def _commit() -> str:
    try:
        out = subprocess.run(
            ["git", "-C", str(ROOT), "rev-parse", "--short", "HEAD"],
            capture_output=True,
            text=True,
            timeout=10,
        )
        dirty = subprocess.run(
            ["git", "-C", str(ROOT), "status", "--porcelain", "--untracked-files=no"],
            capture_output=True,
            text=True,
            timeout=10,
        )
    except (OSError, subprocess.SubprocessError):
        return "unknown"
    commit = out.stdout.strip() or "unknown"
    return f"{commit}+dirty" if dirty.stdout.strip() else commit


class DurationRecorder:
    """Collects each test's phases from its reports (the controller's, under xdist)."""

    def __init__(self, config: pytest.Config, path: Path) -> None:
        self.config = config
        self.path = path
        self.started = time.time()
        self.commit = _commit()  # at the start: the tree the tests ran on
        self.tests: dict[str, dict[str, Any]] = {}

    def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:
        gateway = getattr(getattr(report, "node", None), "gateway", None)
        entry = self.tests.setdefault(
            report.nodeid,
            {
                "nodeid": report.nodeid,
                "outcome": "passed",
                "setup": 0.0,
                "call": 0.0,
                "teardown": 0.0,
                "worker": getattr(gateway, "id", None),
            },
        )
        entry[report.when] = round(float(report.duration), 3)
        if report.failed:
            entry["outcome"] = "failed" if report.when == "call" else f"error ({report.when})"
        elif report.skipped and entry["outcome"] == "passed":
            entry["outcome"] = "skipped"
        marks = dict(report.user_properties).get(MARKS)
        if marks:
            entry["marks"] = marks

    def pytest_sessionfinish(self, session: pytest.Session, exitstatus: int) -> None:
        tests = sorted(self.tests.values(), key=lambda t: t["nodeid"])
        for t in tests:
            t["seconds"] = round(t["setup"] + t["call"] + t["teardown"], 3)
            if t.get("worker") is None:
                t.pop("worker", None)
        numprocesses = getattr(self.config.option, "numprocesses", None)
        record = {
            "commit": self.commit,
            "date": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(self.started)),
            "args": list(self.config.invocation_params.args),
            "markexpr": self.config.option.markexpr,
            "workers": numprocesses or 0,
            "exitstatus": int(exitstatus),
            "wall_s": round(time.time() - self.started, 1),
            "test_seconds": round(sum(t["seconds"] for t in tests), 1),
            "count": len(tests),
            "outcomes": _count(t["outcome"] for t in tests),
            "tests": tests,
        }
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self.path.write_text(json.dumps(record, indent=1) + "\n")
        if _is_full_run(self.config) and self.path == DEFAULT:
            FULL.write_text(self.path.read_text())


def _count(values: Any) -> dict[str, int]:
    out: dict[str, int] = defaultdict(int)
    for v in values:
        out[v] += 1
    return dict(sorted(out.items()))


def _is_full_run(config: pytest.Config) -> bool:
    return is_full_run(
        list(config.invocation_params.args), config.option.markexpr, config.option.collectonly
    )


def is_full_run(flags: list[str], markexpr: str, collect_only: bool) -> bool:
    """``make test``'s selection: the configured test paths, the default markers, no -k,
    and tests that ran (a ``--collect-only`` run of everything ran none)."""
    args = [a for a in flags if not a.startswith("-")]
    narrowed = any(a in flags for a in ("-k", "--lf", "--ff", "-x", "--sw")) or any(
        f.startswith(("-k", "--deselect")) for f in flags
    )
    default_marks = "not container and not upstream"
    # Values of -n/--dist/-m etc. are not paths: a full run names no path under tests/.
    paths = [a for a in args if Path(a.split("::")[0]).exists() and a.split("::")[0] != "."]
    return not (narrowed or paths or collect_only) and markexpr == default_marks


class MarkNoter:
    """Puts each test's markers (of :data:`NOTED`) into its reports, which xdist sends on."""

    @pytest.hookimpl(tryfirst=True)
    def pytest_runtest_setup(self, item: pytest.Item) -> None:
        marks = sorted({m.name for m in item.iter_markers() if m.name in NOTED})
        if marks:
            item.user_properties.append((MARKS, marks))


def register(config: pytest.Config) -> None:
    """Called from tests/conftest.py's pytest_configure (controller and workers)."""
    setting = os.environ.get(ENV, "")
    if setting == "off":
        return
    config.pluginmanager.register(MarkNoter(), "trcomp-durations-marks")
    if hasattr(config, "workerinput"):
        return
    path = Path(setting) if setting else DEFAULT
    config.pluginmanager.register(DurationRecorder(config, path), "trcomp-durations")


# ---- reading ----


def _group(nodeid: str, depth: int) -> str:
    path = nodeid.split("::")[0]
    if depth <= 0:
        return path
    parts = path.split("/")
    return "/".join(parts[: min(depth, len(parts) - 1)]) + "/"


def report(record: dict[str, Any], top: int, depth: int) -> str:
    tests = record["tests"]
    total = sum(t["seconds"] for t in tests) or 1.0
    lines = [
        f"commit {record['commit']}  {record['date']}  {record['count']} tests  "
        f"{record['outcomes']}  wall {record['wall_s']:.0f} s  "
        f"test-seconds {record['test_seconds']:.0f} ({record['workers']} workers)",
        "",
        f"slowest {top} tests (setup+call+teardown):",
    ]
    for t in sorted(tests, key=lambda t: -t["seconds"])[:top]:
        marks = ",".join(t.get("marks", []))
        lines.append(f"{t['seconds']:8.1f} s  {t['nodeid']}  {marks}")
    for label, d in (("files", 0), ("directories", depth)):
        groups: dict[str, list[float]] = defaultdict(list)
        for t in tests:
            groups[_group(t["nodeid"], d)].append(t["seconds"])
        lines += ["", f"by {label} (seconds, share, tests):"]
        ranked = sorted(groups.items(), key=lambda kv: -sum(kv[1]))
        for name, secs in ranked[: top if d == 0 else None]:
            s = sum(secs)
            lines.append(f"{s:8.1f} s  {100 * s / total:5.1f}%  {len(secs):4d}  {name}")
    return "\n".join(lines)


def compare(before: dict[str, Any], after: dict[str, Any], top: int) -> str:
    def by_file(rec: dict[str, Any]) -> dict[str, float]:
        out: dict[str, float] = defaultdict(float)
        for t in rec["tests"]:
            out[_group(t["nodeid"], 0)] += t["seconds"]
        return out

    b, a = by_file(before), by_file(after)
    lines = [
        f"before {before['commit']}: wall {before['wall_s']:.0f} s, "
        f"{before['test_seconds']:.0f} test-s, {before['count']} tests",
        f"after  {after['commit']}: wall {after['wall_s']:.0f} s, "
        f"{after['test_seconds']:.0f} test-s, {after['count']} tests",
        "",
        "  before    after    delta  file",
    ]
    names = sorted({*a, *b}, key=lambda n: a.get(n, 0) - b.get(n, 0))
    for n in names[:top]:
        lines.append(f"{b.get(n, 0):8.1f} {a.get(n, 0):8.1f} {a.get(n, 0) - b.get(n, 0):8.1f}  {n}")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tests.helpers.durations")
    parser.add_argument("file", nargs="?", default=str(DEFAULT))
    parser.add_argument("-n", "--top", type=int, default=25)
    parser.add_argument("--depth", type=int, default=2, help="directory levels per group")
    parser.add_argument("--compare", metavar="AFTER", help="a second record: per-file change")
    opts = parser.parse_args(argv)
    record = json.loads(Path(opts.file).read_text())
    if opts.compare:
        print(compare(record, json.loads(Path(opts.compare).read_text()), opts.top))
    else:
        print(report(record, opts.top, opts.depth))
    return 0


if __name__ == "__main__":
    sys.exit(main())
