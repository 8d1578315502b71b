"""The tests' one check of inductor's CPU vector ISAs per process (tests/helpers/vec_isa.py)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.helpers import compile_cache, vec_isa

REPO = Path(__file__).resolve().parents[2]
PICK = """
import json, os, sys
from pathlib import Path
from tests.helpers import vec_isa
from torch._inductor import cpu_vec_isa
forked = vec_isa.pick_in_this_process(Path(sys.argv[1]))
valid = cpu_vec_isa.valid_vec_isa_list()
print(json.dumps({
    "checked": [str(isa) for isa in valid],
    "flags": [isa.build_arch_flags() for isa in valid],
    "forked": forked,
    "cache_env": os.environ.get("TORCHINDUCTOR_CACHE_DIR"),
    "built": sorted(p.suffix for p in Path(sys.argv[1]).rglob("*.so")),
}))
"""


def _check_imports_torch() -> None:
    from torch._inductor.cpu_vec_isa import VecISA

    if not VecISA._avx_py_load.lstrip().startswith("import torch"):
        pytest.skip("this torch's load check starts no torch import (and keeps its answer)")


def test_the_forked_load_check_answers_as_inductors_own_check(tmp_path: Path) -> None:
    """A new process checks its ISAs with each load check in a fork of itself; the
    session's probe ran inductor's own check, each load in a new Python. Both pick the
    same ISAs with the same compiler flags (AVX-512's bf16 and AMX show in the flags),
    and the process's ``TORCHINDUCTOR_CACHE_DIR`` is left unset, as it was."""
    _check_imports_torch()
    real = vec_isa.recorded(compile_cache.directory())
    if real is None:
        pytest.skip("the session's probe did not run its check on this machine")
    env = {k: v for k, v in os.environ.items() if k != vec_isa.CACHE_ENV}
    env["PYTHONPATH"] = os.pathsep.join([str(REPO), env.get("PYTHONPATH", "")])
    done = subprocess.run(
        [sys.executable, "-c", PICK, str(tmp_path)],
        env=env, cwd=REPO, capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-2000:]
    seen = json.loads(done.stdout.splitlines()[-1])
    assert (seen["checked"], seen["flags"]) == (real["checked"], real["flags"])
    # Each ISA past the base ones (or every one, without the session's setting) was loaded.
    extra = any("bf16" in flags or "amx" in flags for flags in real["flags"])
    assert seen["forked"] > 0 or not (extra or env.get(vec_isa.ENV) != "1")
    assert seen["cache_env"] is None and (seen["built"] or not seen["forked"])


def test_the_load_check_forks_with_torchs_own_command_and_fails_as_it_would(
    tmp_path: Path,
) -> None:
    _check_imports_torch()
    from torch._inductor.cpu_vec_isa import VecISA

    forked = vec_isa._ForkedLoad(subprocess)
    command = VecISA._avx_py_load.replace("__lib_path__", str(tmp_path / "missing.so"))
    with pytest.raises(subprocess.CalledProcessError):
        forked.check_call([sys.executable, "-c", command], cwd=tmp_path)
    assert forked.forked == 1  # torch's own command was recognised, not run
    assert forked.check_call(["true"]) == 0 and forked.forked == 1  # anything else: run
    with pytest.raises(subprocess.CalledProcessError):
        forked.check_call(["false"])


def test_a_clean_clones_environment_reads_the_probes_record(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The record holds the Python behind an environment, not the environment's own
    path: another clone's ``.venv/bin/python`` (a link to the same interpreter) reads it
    back and runs no probe; a record from another interpreter is probed again."""
    monkeypatch.delenv(vec_isa.ENV, raising=False)
    monkeypatch.delenv(vec_isa.SETTING, raising=False)
    isas = ["avx512", "avx2"]
    result = {"checked": isas, "flags": ["-mavx512f", "-mavx2"], "reported": isas}
    (tmp_path / "vec-isa.json").write_text(
        json.dumps({"machine": vec_isa._machine(), "result": result})
    )
    clone = tmp_path / "clone" / ".venv" / "bin"
    clone.mkdir(parents=True)
    (clone / "python").symlink_to(sys.executable)
    monkeypatch.setattr(sys, "executable", str(clone / "python"))
    probed: list[object] = []

    def probe_run(*args: object, **kwargs: object) -> None:
        probed.append(args)
        raise subprocess.SubprocessError("not run here")

    monkeypatch.setattr(vec_isa.subprocess, "run", probe_run)
    assert vec_isa.probe(tmp_path) is True and probed == []
    assert os.environ[vec_isa.ENV] == "1" and vec_isa.recorded(tmp_path) == result
    monkeypatch.delenv(vec_isa.ENV)
    other = {**vec_isa._machine(), "python": "/opt/other/python3"}
    (tmp_path / "vec-isa.json").write_text(json.dumps({"machine": other, "result": result}))
    assert vec_isa.probe(tmp_path) is False and len(probed) == 1  # probed again
