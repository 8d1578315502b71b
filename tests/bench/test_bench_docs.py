"""The Python examples in docs/benchmarks.md run as written."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

DOC = Path(__file__).resolve().parents[2] / "docs" / "benchmarks.md"
BLOCKS = re.findall(r"```python\n(.*?)```", DOC.read_text(), flags=re.S)


def test_the_page_has_examples() -> None:
    assert len(BLOCKS) >= 3


@pytest.mark.parametrize("index", range(len(BLOCKS)))
def test_example_runs(index: int, clean_env: pytest.MonkeyPatch) -> None:
    code = BLOCKS[index]
    if "run_benchmark(" in code:
        pytest.skip("runs real measurements; the same path is tested in test_bench_run.py")
    clean_env.setenv("USE_TORCH_XLA", "0")
    namespace: dict[str, object] = {}
    exec(compile(code, f"{DOC}:block{index}", "exec"), namespace)
    if "make" in namespace:  # the user-model example: it must follow the contract
        from trcomp_bench.workloads import loss_of

        model, batch_fn = namespace["make"](4)  # type: ignore[operator]
        assert loss_of(model(*batch_fn(0))).ndim == 0
