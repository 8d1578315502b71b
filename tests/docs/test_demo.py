"""The README's main job (docs/examples/demo.py) runs and reports what the compiler did."""

from __future__ import annotations

import importlib.util
import tarfile
from pathlib import Path
from typing import Any

import pytest

from tests.helpers import vec_isa
from tests.helpers.records import compilations, records_in_members

DEMO = Path(__file__).resolve().parents[2] / "docs" / "examples" / "demo.py"


# inductor checks the CPU's vector ISAs in every compiling process, each in a Python that
# imports torch: seconds of CPU. The session checked them once (tests/helpers/vec_isa.py);
# a process-mode job does not inherit TORCHINDUCTOR_* from this process, so its result
# goes in through the estimator's environment=.


@pytest.mark.slow
def test_demo_trains_with_the_compiler_and_reports(
    tmp_path: Path, capsys, monkeypatch: pytest.MonkeyPatch
) -> None:
    import trcomp

    class PyTorch(trcomp.PyTorch):  # type: ignore[misc]
        def __init__(self, *args: Any, **kwargs: Any) -> None:
            super().__init__(*args, environment=vec_isa.environment(), **kwargs)

    monkeypatch.setattr(trcomp, "PyTorch", PyTorch)  # demo.main imports it when it runs
    spec = importlib.util.spec_from_file_location("trcomp_demo", DEMO)
    assert spec and spec.loader
    demo = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(demo)

    # 16 steps: enough for the job to measure its own speed-up over eager (15).
    summary = demo.main(["--steps", "16", "--work-dir", str(tmp_path)])

    assert summary["backend"] == "inductor" and summary["outcome"] == "success"
    assert summary["metrics"]["graphs_compiled"] >= 1
    # The job's own folder under output_path: <output_path>/<job name>/output/.
    (model,) = (tmp_path / "output").glob("*/output/model.tar.gz")
    with tarfile.open(model) as tar:
        assert "model.pt" in tar.getnames()
    with tarfile.open(model.with_name("output.tar.gz")) as tar:
        members = {m.name: tar.extractfile(m).read() for m in tar.getmembers() if m.isfile()}  # type: ignore[union-attr]
    # Counted, not timed: the compilations behind compile_time_s, and every step.
    (record,) = records_in_members(members)
    assert compilations(record) >= 1 and record["steps"] == summary["ranks"][0]["steps"] == 16
    # the compile cache went to the job's checkpoint location, for the next job
    assert any((tmp_path / "checkpoints").rglob("*"))
    assert summary["cache_dir"] == f"{(tmp_path / 'checkpoints').as_uri()}/trcomp-cache"
    out = capsys.readouterr().out
    assert f"model:    file://{model}" in out
    assert "compile_time_s:" in out
    assert summary["speedup"]["source"] == "measured"
    assert "vs eager, measured in this job; kept" in out
