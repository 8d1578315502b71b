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
holds torch's version) with the CPU's flags, the compiler's identity and the Python
behind the environment, and read back by later sessions while those hold: a clean
clone's session, and make test-sdk-lowest's beside make test, do not probe again.
``TRCOMP_TEST_VEC_ISA=check`` leaves every check to inductor. The Docker tests' jobs
(make test-container) never get the setting: they check as a user's job does.
"""

from __future__ import annotations

import ctypes
import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

ENV = "TORCHINDUCTOR_VEC_ISA_OK"
CACHE_ENV = "TORCHINDUCTOR_CACHE_DIR"
RECORD = "vec-isa.json"  # the probe's result, next to the warm compile cache
SETTING = "TRCOMP_TEST_VEC_ISA"
_PROBE = """
import json
from torch._inductor import config, cpu_vec_isa
valid = cpu_vec_isa.valid_vec_isa_list()
checked = [str(isa) for isa in valid]
flags = [isa.build_arch_flags() for isa in valid]
config.cpp.vec_isa_ok = True
reported = [str(isa) for isa in cpu_vec_isa.valid_vec_isa_list()]
print(json.dumps({"checked": checked, "flags": flags, "reported": reported}))
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
    # The interpreter behind the environment: each clean clone has its own, from one Python
    # and (in the compile cache's directory) one torch.
    return {"flags": flags, "compiler": identity, "python": os.path.realpath(sys.executable)}


def probe(directory: Path) -> bool:
    """Whether every process of the session may skip the check; sets :data:`ENV` if so.

    Runs in the controller, before the workers start (they inherit it).
    """
    if os.environ.get(SETTING) == "check" or ENV in os.environ:
        return os.environ.get(ENV) == "1"
    kept = directory / RECORD
    machine = _machine()
    result = None
    try:
        stored = json.loads(kept.read_text())
        if stored.get("machine") == machine and "flags" in stored["result"]:
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


def recorded(directory: Path) -> dict[str, Any] | None:
    """The real check's result :func:`probe` keeps in ``directory`` for this CPU and
    Python (a test sees the tests' g++ wrapper first on ``PATH``, the probe the real one)."""
    try:
        stored = json.loads((directory / RECORD).read_text())
    except (OSError, ValueError):
        return None
    machine, here = stored.get("machine", {}), _machine()
    same = all(machine.get(name) == here[name] for name in ("flags", "python"))
    return stored.get("result") if same else None


def environment() -> dict[str, str]:
    """The setting for a job's environment, when this session's probe allowed it."""
    return {ENV: "1"} if os.environ.get(ENV) == "1" else {}


_LOADED = re.compile(r'\bcdll\.LoadLibrary\("(?P<path>[^"]+)"\)\s*$')


class _ForkedLoad:
    """``subprocess`` for inductor's ISA module while :func:`pick_in_this_process` runs:
    the load check (``python -c "import torch ... cdll.LoadLibrary(path)"``) done in a
    fork of this process, which has imported torch; anything else as ``subprocess``."""

    def __init__(self, real: Any) -> None:
        self._real = real
        self.forked = 0

    def __getattr__(self, name: str) -> Any:
        return getattr(self._real, name)

    def check_call(self, args: Any, **kwargs: Any) -> int:
        code = args[2] if isinstance(args, list) and len(args) == 3 and args[1] == "-c" else ""
        found = _LOADED.search(code) if "import torch" in code else None
        if found is None:
            return int(self._real.check_call(args, **kwargs))
        pid = os.fork()
        if pid == 0:  # pragma: no cover (the child leaves at once)
            try:
                ctypes.cdll.LoadLibrary(found["path"])
            except BaseException:
                os._exit(1)
            os._exit(0)
        self.forked += 1
        status = os.waitstatus_to_exitcode(os.waitpid(pid, 0)[1])
        if status != 0:
            raise subprocess.CalledProcessError(status, args)
        return 0


def pick_in_this_process(cache: Path | None = None) -> int:
    """Inductor's ``pick_vec_isa()`` for this process (it keeps the answer), with each
    build's load check in a fork of it rather than a new Python that imports torch; the
    number of forks.

    With :data:`ENV` set, inductor still checks what the CPU reports beyond its base ISAs
    (AVX-512's bf16, AMX tiles, AMX fp16) by building a kernel and loading it in a new
    Python: three Python starts that each import torch (1.6 CPU-seconds each here) in
    every process that compiles, on a CPU that has them. A fork of a process that has
    imported torch loads the same library against the same torch, so it answers the
    same: the zygotes (tests/helpers/zygote.py) and the xdist workers do this once, and
    their forks and in-process compiles keep the answer. Torch 2.14's check loads the
    library without importing torch and keeps a marker of its answer: it runs as it is.
    ``TRCOMP_TEST_VEC_ISA=check``: nothing done here, inductor checks as it would.

    The check builds in ``TORCHINDUCTOR_CACHE_DIR``, else in ``cache``; inductor sets that
    variable when it looks for its cache, so it is left as it was found.
    """
    if os.environ.get(SETTING) == "check":
        return 0
    from torch._inductor import cpu_vec_isa

    real = cpu_vec_isa.subprocess
    forked = _ForkedLoad(real)
    found = os.environ.get(CACHE_ENV)
    if found is None and cache is not None:
        os.environ[CACHE_ENV] = str(cache)
    cpu_vec_isa.subprocess = forked  # type: ignore[assignment]
    try:
        cpu_vec_isa.pick_vec_isa()
    finally:
        cpu_vec_isa.subprocess = real
        if found is None:
            os.environ.pop(CACHE_ENV, None)
        else:
            os.environ[CACHE_ENV] = found
    return forked.forked
