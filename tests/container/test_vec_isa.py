"""The tests' one check of inductor's CPU vector ISAs per process (tests/helpers/vec_isa.py)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.helpers import compile_cache, vec_isa


def test_the_forked_load_check_answers_as_inductors_own_check() -> None:
    """This process checked its ISAs with forked load checks (conftest's
    ``pytest_collection_finish``, or here); the session's probe ran inductor's own check, every
    load in a new Python. Both pick the same ISAs with the same compiler flags (AVX-512's
    bf16 and AMX show in the flags)."""
    if os.environ.get(vec_isa.SETTING) == "check":
        pytest.skip("TRCOMP_TEST_VEC_ISA=check: inductor checks in every process")
    real = vec_isa.recorded(compile_cache.directory())
    if real is None:
        pytest.skip("the session's probe did not run its check on this machine")
    from torch._inductor import cpu_vec_isa

    vec_isa.pick_in_this_process()  # done already where collection imported torch
    # Each ISA past the base ones (or every one, without the session's setting) was loaded.
    extra = any("bf16" in flags or "amx" in flags for flags in real["flags"])
    assert vec_isa.FORKED_LOADS[0] > 0 or not (extra or os.environ.get(vec_isa.ENV) != "1")
    valid = cpu_vec_isa.valid_vec_isa_list()
    assert [str(isa) for isa in valid] == real["checked"]
    assert [isa.build_arch_flags() for isa in valid] == real["flags"]


def test_the_load_check_forks_with_torchs_own_command_and_fails_as_it_would(
    tmp_path: Path,
) -> None:
    from torch._inductor.cpu_vec_isa import VecISA

    forked = vec_isa._ForkedLoad(subprocess)
    command = VecISA._avx_py_load.replace("__lib_path__", str(tmp_path / "missing.so"))
    with pytest.raises(subprocess.CalledProcessError):
        forked.check_call([sys.executable, "-c", command], cwd=tmp_path)
    assert forked.forked == 1  # torch's own command was recognised, not run
    assert forked.check_call(["true"]) == 0 and forked.forked == 1  # anything else: run
    with pytest.raises(subprocess.CalledProcessError):
        forked.check_call(["false"])
