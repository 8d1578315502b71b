"""Every table of measured numbers in docs/ is generated from committed JSON, and agrees with it."""

from __future__ import annotations

import json
import re
import shutil
from pathlib import Path

import pytest

from trcomp_bench import doctables
from trcomp_bench.results import markdown_table, read_json

DOCS = Path(__file__).resolve().parents[2] / "docs"
# Files a tool writes whole (the bench's --markdown), with the JSON it wrote beside them.
WRITTEN_WHOLE = {"benchmarks/cpu.md": "benchmarks/cpu.json"}
# Tables whose numbers are settings, not measurements: (page, header line).
NOT_MEASURED = {("environment.md", "| Variable | Default | What it changes |")}
# A number with a unit of time, memory or speed-up: what a measurement looks like in a cell.
MEASURED = re.compile(r"(?<![\w.])\d+(?:\.\d+)?(?: ?(?:s|ms|min|MiB|GiB|GB|MB)\b|x(?!\w))")


def _marks() -> list[doctables.Marked]:
    return [mark for page in sorted(DOCS.rglob("*.md")) for mark in doctables.marked_tables(page)]


def _tables(page: Path) -> list[tuple[int, list[str]]]:
    """(line number, lines) of every markdown table of ``page``."""
    lines = page.read_text().split("\n")
    found, i = [], 0
    while i < len(lines):
        j = i
        while j < len(lines) and lines[j].startswith("|"):
            j += 1
        if j > i:
            found.append((i, lines[i:j]))
        i = max(j, i + 1)
    return found


def test_the_pages_mark_their_tables() -> None:
    kinds = {mark.kind for mark in _marks()}
    assert kinds == set(doctables.KINDS)


@pytest.mark.parametrize(
    "mark", _marks(), ids=lambda m: f"{m.page.name}:{m.json_path.relative_to(DOCS)}"
)
def test_a_marked_table_is_what_its_json_renders(mark: doctables.Marked) -> None:
    expected = doctables.render(mark.kind, mark.json_path)
    assert mark.text == expected, (
        f"{mark.page.name}: the table differs from {mark.json_path.name}; "
        "run python -m trcomp_bench.doctables"
    )


@pytest.mark.parametrize(("written", "source"), sorted(WRITTEN_WHOLE.items()))
def test_the_bench_markdown_file_is_what_its_json_renders(written: str, source: str) -> None:
    # read_json refuses rows whose keys are not the writer's: a change of the
    # Row shape (a new column from make bench) fails here until cpu.json is rerun.
    assert (DOCS / written).read_text() == markdown_table(read_json(DOCS / source))


def test_no_table_of_measurements_is_kept_by_hand() -> None:
    unmarked = []
    for page in sorted(DOCS.rglob("*.md")):
        name = str(page.relative_to(DOCS))
        if name in WRITTEN_WHOLE:
            continue
        lines = page.read_text().split("\n")
        for start, table in _tables(page):
            if start and lines[start - 1].startswith("<!-- table: "):
                continue
            if (name, table[0]) in NOT_MEASURED:
                continue
            hits = [hit for row in table[2:] for hit in MEASURED.findall(row)]
            if hits:
                unmarked.append(f"{name}:{start + 1} ({', '.join(hits[:3])})")
    assert not unmarked, f"tables of measurements with no JSON behind them: {unmarked}"


def test_every_json_file_is_behind_a_table() -> None:
    used = {mark.json_path for mark in _marks()} | {DOCS / p for p in WRITTEN_WHOLE.values()}
    committed = {p for d in ("benchmarks", "timings") for p in (DOCS / d).glob("*.json")}
    assert committed - used == set()


def test_recorded_tables_say_when_and_where_they_were_measured() -> None:
    recorded = [mark.json_path for mark in _marks() if mark.kind == "recorded"]
    assert recorded
    for path in recorded:
        data = json.loads(path.read_text())
        assert re.fullmatch(r"\d{4}-\d{2}-\d{2}", data["measured"]), path
        assert re.search(r"commits? [0-9a-f]{7}", data["source"]), path


def test_the_check_finds_a_table_that_drifted_from_its_json(tmp_path: Path) -> None:
    docs = tmp_path / "docs"
    shutil.copytree(DOCS, docs)
    assert doctables.check(docs) == []
    data_path = docs / "benchmarks" / "cpu-jax-2026-12-01.json"
    data = json.loads(data_path.read_text())
    data["rows"][0][6] = "1188.0"  # one step time changed in the JSON only
    data_path.write_text(json.dumps(data))
    assert doctables.check(docs) == [
        "benchmarks.md: the table from benchmarks/cpu-jax-2026-12-01.json"
    ]
    assert doctables.main(["--check", "--docs", str(docs)]) == 1
    assert doctables.update(docs) == [docs / "benchmarks.md"]
    assert "| 1188.0 |" in (docs / "benchmarks.md").read_text()
    assert doctables.check(docs) == []


def test_a_recorded_row_of_the_wrong_width_is_an_error(tmp_path: Path) -> None:
    path = tmp_path / "t.json"
    path.write_text(
        json.dumps({"measured": "2026-12-01", "source": "x", "header": ["a", "b"], "rows": [["1"]]})
    )
    with pytest.raises(ValueError, match="has 1 cells, the header 2"):
        doctables.render("recorded", path)
