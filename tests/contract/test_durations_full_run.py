"""Which pytest runs count as a whole ``make test`` (tests/helpers/durations.py): only
those copy their durations to build/test-durations-full.json, which ``make timings-save``
keeps in docs/timings/."""

from __future__ import annotations

import pytest

from tests.helpers.durations import is_full_run

DEFAULT = "not container and not upstream"


def test_make_tests_run_is_full() -> None:
    assert is_full_run(["-n", "3", "--dist", "worksteal"], DEFAULT, collect_only=False)


@pytest.mark.parametrize(
    ("flags", "markexpr", "collect_only"),
    [
        (["-n", "3"], DEFAULT, True),  # a whole collection ran no test: it kept 0 tests once
        (["tests/contract"], DEFAULT, False),
        (["-k", "corpus"], DEFAULT, False),
        (["-x"], DEFAULT, False),
        ([], "slow", False),
    ],
)
def test_narrowed_or_collect_only_runs_are_not(
    flags: list[str], markexpr: str, collect_only: bool
) -> None:
    assert not is_full_run(flags, markexpr, collect_only)
