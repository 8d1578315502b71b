"""The tables of measured numbers in docs/, generated from the committed JSON behind them.

A page marks each such table with the line ``<!-- table: KIND PATH -->`` right
above it; ``PATH`` is the JSON file, relative to docs/, and ``KIND`` names the
tool whose writer turns it into markdown:

- ``bench``: rows the benchmark wrote (``python -m trcomp_bench --json``),
  rendered by :func:`trcomp_bench.results.markdown_table`;
- ``launch``: rows the launch measurement wrote (``python -m trcomp_bench.launch
  --json``), rendered by :func:`trcomp_bench.launch.markdown_table`;
- ``speedup_jobs``: the reference workloads run as jobs (``python -m
  trcomp_bench.speedup_jobs --json``), rendered by
  :func:`trcomp_bench.speedup_jobs.markdown_table`;
- ``warmstart``: the warm-start run per torch version (``python -m
  trcomp_bench.warmstart --json``), rendered by
  :func:`trcomp_bench.warmstart.markdown_table`;
- ``durations``: the per-test durations of a whole ``make test`` (written by the
  tests' plugin, tests/helpers/durations.py, kept by ``make timings-save``),
  rendered by :func:`_durations` as seconds per test directory;
- ``h200``: a run of the GPU script (``python -m trcomp_bench.gpu_h200``, its
  ``<out>.json``), rendered by :func:`trcomp_bench.gpu_h200.format_report`;
- ``recorded``: numbers measured before their tool kept JSON (command timings,
  runs whose raw rows were not kept): an object with ``measured`` (the date),
  ``source`` (how and where it was measured, the commit that first recorded
  it), ``header`` and ``rows`` (the cells exactly as first written), rendered
  by :func:`trcomp_bench.results.table`.

``python -m trcomp_bench.doctables`` rewrites every marked table from its
JSON; ``--check`` only reports the tables that differ (exit 1).
tests/docs/test_doc_tables.py runs the check.
"""

from __future__ import annotations

import argparse
import json
import re
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from trcomp_bench.results import read_json, table

__all__ = ["KINDS", "MARK", "Marked", "check", "main", "marked_tables", "render", "update"]

DOCS = Path(__file__).resolve().parents[2] / "docs"
MARK = re.compile(r"^<!-- table: (?P<kind>\w+) (?P<path>\S+) -->\n", re.M)
RECORDED_KEYS = frozenset({"measured", "source", "header", "rows"})


def _bench(path: Path) -> str:
    from trcomp_bench.results import markdown_table

    return markdown_table(read_json(path))


def _launch(path: Path) -> str:
    from trcomp_bench.launch import markdown_table

    return markdown_table(json.loads(path.read_text()))


def _speedup_jobs(path: Path) -> str:
    from trcomp_bench.speedup_jobs import markdown_table

    return markdown_table(json.loads(path.read_text()))


def _warmstart(path: Path) -> str:
    from trcomp_bench.warmstart import markdown_table

    return markdown_table(json.loads(path.read_text()))


def _h200(path: Path) -> str:
    """The table of a ``trcomp_bench.gpu_h200`` run (runs that failed are listed under it)."""
    from trcomp_bench.gpu_h200 import GpuResult, format_report

    data: dict[str, Any] = json.loads(path.read_text())
    results = [GpuResult(**entry["result"]) for entry in data["results"] if "result" in entry]
    return format_report(results).split("\n", 1)[1]


def _recorded(path: Path) -> str:
    data: dict[str, Any] = json.loads(path.read_text())
    missing = RECORDED_KEYS - set(data)
    if missing:
        raise ValueError(f"{path}: a recorded table needs the keys {', '.join(sorted(missing))}")
    width = len(data["header"])
    for row in data["rows"]:
        if len(row) != width:
            raise ValueError(f"{path}: row {row} has {len(row)} cells, the header {width}")
    return table(data["header"], data["rows"])


def _ci(path: Path) -> str:
    """The stage times ``.ci/run`` writes to build/ci-timings.json, as it wrote them."""
    data: dict[str, Any] = json.loads(path.read_text())
    rows = [
        [stage["stage"], f"{stage['start_s']} s", f"{stage['seconds']} s"]
        for stage in data["stages"]
    ]
    last = data["stages"][-1] if data["stages"] else {"start_s": 0, "seconds": 0}
    rows.append(
        [
            f"end of the last stage written (commit {data.get('commit')})",
            "",
            f"{last['start_s'] + last['seconds']} s",
        ]
    )
    return table(["stage", "starts at", "took"], rows)


def _durations(path: Path) -> str:
    """A ``make test`` run's test-seconds per directory (two levels), slowest first."""
    data: dict[str, Any] = json.loads(path.read_text())
    groups: dict[str, list[float]] = {}
    for test in data["tests"]:
        parts = test["nodeid"].split("::")[0].split("/")
        groups.setdefault("/".join(parts[: min(2, len(parts) - 1)]) + "/", []).append(
            float(test["seconds"])
        )
    total = sum(sum(v) for v in groups.values()) or 1.0
    rows = [
        [name, str(len(secs)), f"{sum(secs):.0f} s", f"{100 * sum(secs) / total:.0f}%"]
        for name, secs in sorted(groups.items(), key=lambda kv: -sum(kv[1]))
    ]
    rows.append(
        [
            f"all ({data['workers']} workers; commit {data['commit']}, {data['date']})",
            str(data["count"]),
            f"{total:.0f} s (wall {data['wall_s']:.0f} s)",
            "100%",
        ]
    )
    return table(["tests under", "tests", "test-seconds", "share"], rows)


KINDS: dict[str, Callable[[Path], str]] = {
    "bench": _bench,
    "ci": _ci,
    "durations": _durations,
    "h200": _h200,
    "launch": _launch,
    "recorded": _recorded,
    "speedup_jobs": _speedup_jobs,
    "warmstart": _warmstart,
}


def render(kind: str, path: Path) -> str:
    """The markdown table the ``kind`` tool writes for the JSON at ``path``."""
    if kind not in KINDS:
        raise ValueError(f"unknown table kind {kind!r}; one of {', '.join(KINDS)}")
    return KINDS[kind](path)


@dataclass(frozen=True)
class Marked:
    """One marked table of a page: where its lines are, and what they are now."""

    page: Path
    kind: str
    json_path: Path
    start: int  # offset of the table's first character in the page's text
    end: int  # offset just after its last line
    text: str


def marked_tables(page: Path, docs: Path = DOCS) -> list[Marked]:
    """Every table of ``page`` that has a ``<!-- table: ... -->`` line above it."""
    text = page.read_text()
    found = []
    for match in MARK.finditer(text):
        start = end = match.end()
        while text.startswith("|", end):
            end = text.index("\n", end) + 1 if "\n" in text[end:] else len(text)
        found.append(
            Marked(
                page,
                match["kind"],
                docs / match["path"],
                start,
                end,
                text[start:end],
            )
        )
    return found


def check(docs: Path = DOCS) -> list[str]:
    """One line per marked table that differs from its JSON (empty: all agree)."""
    stale = []
    for page in sorted(docs.rglob("*.md")):
        for mark in marked_tables(page, docs):
            if mark.text != render(mark.kind, mark.json_path):
                where = mark.page.relative_to(docs)
                stale.append(f"{where}: the table from {mark.json_path.relative_to(docs)}")
    return stale


def update(docs: Path = DOCS) -> list[Path]:
    """Rewrite every marked table from its JSON; the pages that changed."""
    changed = []
    for page in sorted(docs.rglob("*.md")):
        marks = marked_tables(page, docs)
        text = original = page.read_text()
        for mark in reversed(marks):  # from the end, so earlier offsets stay valid
            text = text[: mark.start] + render(mark.kind, mark.json_path) + text[mark.end :]
        if text != original:
            page.write_text(text)
            changed.append(page)
    return changed


def main(argv: list[str] | None = None) -> int:
    """Command line: regenerate the tables, or with ``--check`` list the stale ones."""
    parser = argparse.ArgumentParser(description="Generate docs/ tables from their JSON.")
    parser.add_argument("--check", action="store_true", help="change nothing; exit 1 if stale")
    parser.add_argument("--docs", type=Path, default=DOCS, help="the docs directory")
    args = parser.parse_args(argv)
    if args.check:
        stale = check(args.docs)
        for line in stale:
            print(f"stale: {line}; run python -m trcomp_bench.doctables", file=sys.stderr)
        return 1 if stale else 0
    for page in update(args.docs):
        print(f"rewrote tables in {page}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
