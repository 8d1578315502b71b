"""The docs: every python example runs, and the config reference matches the model."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from trcomp.config import TrainingCompilerConfig

DOCS = Path(__file__).resolve().parents[2] / "docs"
# Pages whose python examples need AWS, Docker or a GPU are listed with the reason.
NOT_RUN = {
    "remote.md": "submits to AWS",
    "local-mode.md": "needs Docker and the image (tests/docker runs these jobs)",
    "benchmarks.md": "runs the full benchmark",
    "v3.md": "needs the SDK v3 environment and Docker (tests/v3/test_v3_local_container.py)",
}
_BLOCK = re.compile(r"^```python\n(.*?)^```", re.S | re.M)


def _examples() -> list[tuple[str, int, str]]:
    found = []
    for page in sorted(DOCS.rglob("*.md")):
        if page.name in NOT_RUN:
            continue
        for index, block in enumerate(_BLOCK.findall(page.read_text())):
            found.append((str(page.relative_to(DOCS)), index, block))
    return found


@pytest.mark.parametrize(("page", "index", "code"), _examples())
def test_example_runs(page: str, index: int, code: str, tmp_path, monkeypatch) -> None:
    monkeypatch.chdir(tmp_path)
    exec(compile(code, f"{page}[{index}]", "exec"), {"__name__": "__doc_example__"})


def test_configuration_reference_lists_every_field() -> None:
    text = (DOCS / "configuration.md").read_text()
    rows = dict(re.findall(r"^\| `(\w+)` \| [^|]+ \| `([^`]*)` \|", text, re.M))
    assert set(rows) == set(TrainingCompilerConfig.model_fields)
    for name, field in TrainingCompilerConfig.model_fields.items():
        default = field.default_factory() if field.default_factory else field.default
        assert rows[name] == repr(default).replace("'", '"'), name


def test_configuration_reference_shows_the_default_hyperparameters() -> None:
    text = (DOCS / "configuration.md").read_text()
    for key, value in TrainingCompilerConfig().to_hyperparameters().items():
        assert f"{key} " in text
        assert value.strip('"') in text
