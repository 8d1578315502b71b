"""Inductor's CPU vector-ISA check, run once per test session instead of in every process.

Before its first CPU kernel, inductor checks each vector ISA the CPU reports
(AVX-512, AVX2) by building a small kernel and loading it in a new Python
process that imports torch (``cpu_vec_isa.VecISA.check_build``), in every
process that compiles: three Python starts in each corpus script, test job and
rank, each importing torch under the job's start-up hook. The result is the same
on every one of them: one machine, one torch, one compiler.

So the controller runs inductor's real check once (:func:`probe`, in a child
process) and compares the ISAs it passes with the ISAs the CPU reports. When
they are the same list, ``TORCHINDUCTOR_VEC_ISA_OK=1`` (inductor's own setting:
take the reported ISAs as working) picks the same ISA inductor would have
picked, so compiled kernels do not change; the session then sets it for its
workers and for the jobs it starts (``tests/helpers/jobs.job_env``). When they
differ (a compiler without AVX-512, say), nothing is set and every process
checks as before. The result is kept next to the warm compile cache (its key
holds torch's version) with the CPU's flags and the compiler's identity, and
read back by later sessions while those hold. ``TRCOMP_TEST_VEC_ISA=check``
leaves every check to inductor. The Docker tests' jobs (make test-container)
never get the setting: they check as a user's job does.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

ENV = "TORCHINDUCTOR_VEC_ISA_OK"
SETTING = "TRCOMP_TEST_VEC_ISA"
_PROBE = """
import json
from torch._inductor import config, cpu_vec_isa
checked = [str(isa) for isa in cpu_vec_isa.valid_vec_isa_list()]
config.cpp.vec_isa_ok = True
reported = [str(isa) for isa in cpu_vec_isa.valid_vec_isa_list()]
print(json.dumps({"checked": checked, "reported": reported}))
"""


def _machine() -> dict[str, str]:
    """What the check's result depends on besides torch: the CPU's flags, the compiler."""
    flags = ""
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("flags"):
                flags = line
                break
    except OSError:
        pass
    compiler = shutil.which("g++") or ""
    try:
        st = os.stat(compiler) if compiler else None
    except OSError:
        st = None
    identity = f"{compiler}:{st.st_ino}:{st.st_mtime_ns}" if st else compiler
    return {"flags": flags, "compiler": identity, "python": sys.executable}


def probe(directory: Path) -> bool:
    """Whether every process of the session may skip the check; sets :data:`ENV` if so.

    Runs in the controller, before the workers start (they inherit it).
    """
    if os.environ.get(SETTING) == "check" or ENV in os.environ:
        return os.environ.get(ENV) == "1"
    kept = directory / "vec-isa.json"
    machine = _machine()
    result = None
    try:
        stored = json.loads(kept.read_text())
        if stored.get("machine") == machine:
            result = stored["result"]
    except (OSError, ValueError, KeyError):
        pass
    if result is None:
        try:
            out = subprocess.run(
                [sys.executable, "-c", _PROBE],
                capture_output=True,
                text=True,
                timeout=300,
                check=True,
            ).stdout
            result = json.loads(out.strip().splitlines()[-1])
        except (OSError, subprocess.SubprocessError, ValueError, IndexError):
            return False  # no torch here, or the probe failed: every process checks
        kept.write_text(json.dumps({"machine": machine, "result": result}))
    same = bool(result["checked"]) and result["checked"] == result["reported"]
    if same:
        os.environ[ENV] = "1"
    return same


def environment() -> dict[str, str]:
    """The setting for a job's environment, when this session's probe allowed it."""
    return {ENV: "1"} if os.environ.get(ENV) == "1" else {}
