"""Can the chosen compiler start here? Run in a child with the job's environment.

``python -m trcomp_container.probe inductor|xla|jax|eager <gpus>`` prints one JSON
line: ``{"ok": bool, "reason": str, "hardware": str, "gpus_seen": int}``. A
child keeps a broken torch-xla or CUDA set-up from taking the entrypoint down,
and sees exactly the environment the user's script will see.

On GPUs the inductor check compiles and runs a tiny graph on ``cuda:0``, so a
missing C compiler (triton builds its launchers with one), a missing libcuda or
a triton that does not match the GPU fails here, with its reason, before the
job starts. ``jax`` checks JAX (and its CUDA plugin on GPUs) in the
job's environment. ``eager`` only counts the GPUs torch sees. ``gpus_seen`` is torch's
count, which decides how many processes the job starts.
"""

from __future__ import annotations

import dataclasses
import json
import os
import shutil
import subprocess
import sys
import sysconfig
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from trcomp.contract.env import METRICS_DIR_ENV, without_secrets

__all__ = [
    "InductorOptionCheck",
    "ProbeResult",
    "check_inductor_options",
    "compile_tiny_graph",
    "cpu_inductor_check",
    "probe",
    "run_probe",
]

_TIMEOUT_S = 600


@dataclass(frozen=True)
class ProbeResult:
    """Whether the backend can start, and why not."""

    ok: bool
    reason: str = ""
    hardware: str = ""
    gpus_seen: int = 0


# Substrings of compile errors, and what to do about them.
_FIXES = (
    ("C compiler", "install gcc in the image or set CC"),
    ("C++ compiler", "install g++ in the image or set CXX"),
    (
        "libcuda",
        "the driver's libcuda.so is not mounted: run with the NVIDIA container "
        "runtime and NVIDIA_DRIVER_CAPABILITIES including compute (trcomp's image sets it)",
    ),
    ("Python.h", "install the Python headers (python3-dev) in the image"),
)


def probe(backend: str, gpus: int) -> ProbeResult:
    """Check in this process that ``backend`` can run on ``gpus`` GPUs (0: CPU/TPU)."""
    seen = 0
    try:
        if backend == "jax":
            return _probe_jax(gpus)
        if backend == "xla":
            return _probe_xla(gpus)
        seen = _gpus_seen() if gpus else 0
        if gpus and not seen:
            return _no_gpu(gpus)
        if backend == "eager":
            return ProbeResult(True, hardware=f"cuda x{seen}" if seen else "cpu", gpus_seen=seen)
        return compile_tiny_graph("cuda" if gpus else "cpu", seen)
    except Exception as exc:  # any failure to start is the answer, not a crash
        return ProbeResult(False, _failure_text(exc), gpus_seen=seen)


def _failure_text(exc: BaseException) -> str:
    lines = [line for line in str(exc).strip().splitlines() if line.strip()]
    text = f"{type(exc).__name__}: {' | '.join(lines[:6])[:1500]}"
    fixes = [fix for needle, fix in _FIXES if needle in str(exc)]
    return text + (f"; fix: {fixes[0]}" if fixes else "")


def _gpus_seen() -> int:
    import torch

    return torch.cuda.device_count() if torch.cuda.is_available() else 0


def _no_gpu(gpus: int) -> ProbeResult:
    import torch

    why = ""
    try:
        torch.cuda.init()
    except Exception as exc:  # the driver's own words (version mismatch, no device)
        why = f" ({type(exc).__name__}: {str(exc).strip().splitlines()[0][:300]})"
    return ProbeResult(
        False,
        f"torch {torch.__version__} (CUDA {torch.version.cuda}) sees none of the {gpus} "
        f"GPUs{why}: the image needs a CUDA build of torch that matches the driver",
    )


def compile_tiny_graph(device: str, gpus_seen: int = 0) -> ProbeResult:
    """Compile and run ``(2x).relu().sum()`` with inductor on ``device``: a real compile.

    On ``cuda`` this builds a triton kernel (C compiler, libcuda, ptxas); on
    ``cpu`` a C++ kernel (the C++ compiler and Python headers).
    """
    import torch

    def tiny(x: torch.Tensor) -> torch.Tensor:
        return (x * 2).relu().sum()

    target = torch.device(device, 0) if device == "cuda" else torch.device(device)
    compiled = torch.compile(tiny, backend="inductor", fullgraph=True)
    value = float(compiled(torch.ones(8, device=target)).item())
    if value != 16.0:
        return ProbeResult(False, f"inductor computed sum(2*[1]*8) as {value} on {target}")
    if device == "cuda":
        import triton

        hardware = (
            f"cuda x{gpus_seen} ({torch.cuda.get_device_name(target)}), triton {triton.__version__}"
        )
    else:
        hardware = "cpu, inductor compiled a test graph"
    return ProbeResult(True, hardware=hardware, gpus_seen=gpus_seen)


def _probe_xla(gpus: int) -> ProbeResult:
    import torch
    import torch_xla
    import torch_xla.runtime as xr

    device = torch_xla.device()
    hardware = str(xr.device_type())
    if gpus and hardware != "CUDA":
        return ProbeResult(
            False,
            f"torch-xla {torch_xla.__version__} runs on {hardware}, not on the {gpus} GPUs "
            "here (torch-xla 2.9 has no CUDA support)",
            hardware,
        )
    value = (torch.ones(2, device=device) * 2).sum().item()
    if value != 4.0:
        return ProbeResult(False, f"torch-xla computed 2*[1,1] summed as {value}", hardware)
    return ProbeResult(True, hardware=hardware)


def _probe_jax(gpus: int) -> ProbeResult:
    import jax
    import jax.numpy as jnp

    platform = os.environ.get("JAX_PLATFORMS") or "any"
    try:
        found = jax.devices()
    except Exception as exc:  # jax 0.10 raises a bare AssertionError for a missing platform
        return ProbeResult(
            False,
            f"JAX {jax.__version__} has no usable {platform} platform "
            f"({type(exc).__name__}: {exc}): GPU hosts need jax-cuda12-plugin "
            f"{jax.__version__} (trcomp's jax-cuda extra) and a driver for CUDA 12",
        )
    try:
        import torchax
    except ImportError as exc:
        return ProbeResult(
            False,
            f"torchax does not import ({exc}): torch-xla 2.9.0 ships an older torchax copy "
            "that needs flax; reinstall the pinned one last: pip install --no-deps "
            "--force-reinstall torchax==0.0.13",
        )

    hardware = f"{jax.default_backend()} x{len(found)}, jax {jax.__version__}"
    if gpus:
        cuda = [device for device in found if device.platform == "gpu"]
        if len(cuda) < gpus:
            return ProbeResult(
                False,
                f"JAX {jax.__version__} sees {len(cuda)} of the {gpus} GPUs (it runs on "
                f"{jax.default_backend()}): the image needs jax-cuda12-plugin "
                f"{jax.__version__} (trcomp's jax-cuda extra) and a driver for CUDA 12",
                hardware,
            )
    value = float(jnp.sum(jnp.ones(2) * 2))
    if value != 4.0:
        return ProbeResult(False, f"JAX computed 2*[1,1] summed as {value}", hardware)
    return ProbeResult(True, hardware=f"{hardware}, torchax {torchax.__version__}")


def cpu_inductor_check(env: Mapping[str, str]) -> ProbeResult:
    """Inductor on CPU needs a C++ compiler and Python's headers: check both without torch.

    Inductor compiles C++ that includes ``Python.h`` from this interpreter's include
    dir (``sysconfig``'s ``include`` path, as torch finds it); a host with g++ but
    without the headers (no python3-dev) fails in the user's first compiled step.
    torch itself is checked by the script's own start; a child that imports torch
    would add seconds to every CPU job for nothing.
    """
    compiler = env.get("CXX") or "g++"
    found = shutil.which(compiler, path=env.get("PATH"))
    if found is None:
        return ProbeResult(
            False,
            f"inductor needs a C++ compiler on CPU and {compiler!r} was not found: "
            "install g++ in the image or set CXX",
        )
    include = Path(sysconfig.get_path("include"))
    if not (include / "Python.h").is_file():
        version = sysconfig.get_python_version()
        return ProbeResult(
            False,
            f"inductor compiles C++ against Python's headers and {include / 'Python.h'} "
            f"does not exist: install the headers of Python {version} (Debian/Ubuntu: "
            f"apt-get install python{version}-dev, or python3-dev)",
        )
    return ProbeResult(True, hardware=f"cpu, {compiler}")


def run_probe(backend: str, gpus: int, env: Mapping[str, str]) -> ProbeResult:
    """Check ``backend`` can start: in a child process with ``env``.

    CPU inductor is checked in-process (a C++ compiler, Python's headers): a child that
    imports torch and compiles would add seconds to every CPU job.
    """
    if backend == "inductor" and not gpus:
        return cpu_inductor_check(env)
    child_env = {k: v for k, v in without_secrets(env).items() if k != METRICS_DIR_ENV}
    try:
        done = subprocess.run(
            [sys.executable, "-m", "trcomp_container.probe", backend, str(gpus)],
            env=child_env,
            capture_output=True,
            text=True,
            timeout=_TIMEOUT_S,
        )
    except subprocess.TimeoutExpired:
        return ProbeResult(False, f"starting {backend} took longer than {_TIMEOUT_S} s")
    for line in reversed(done.stdout.splitlines()):
        if line.startswith("{"):
            body = json.loads(line)
            return ProbeResult(
                bool(body["ok"]),
                str(body["reason"]),
                str(body["hardware"]),
                int(body.get("gpus_seen", 0)),
            )
    tail = (done.stderr or done.stdout).strip().splitlines()[-5:]
    return ProbeResult(
        False, f"the {backend} check exited with {done.returncode}: " + " | ".join(tail)
    )


_INDUCTOR_OPTIONS = (
    "import json, sys\n"
    "import torch._inductor as inductor\n"
    "import torch._inductor.config as config\n"
    "options, mode = json.loads(sys.argv[1]), sys.argv[2]\n"
    "known = config.get_config_copy()\n"
    "sets = inductor.list_mode_options(mode)\n"
    "print(json.dumps({'unknown': [key for key in options if key not in known],\n"
    "                  'mode_sets': {k: v for k, v in sets.items() if k in options}}))\n"
)


@dataclass(frozen=True)
class InductorOptionCheck:
    """What this torch says of a job's ``inductor_options`` and ``mode``."""

    unknown: list[str]
    """Keys ``torch._inductor.config`` does not have."""
    contradicted: dict[str, tuple[object, object]]
    """Key -> (the user's value, the mode's value) where ``mode`` sets another value."""


def check_inductor_options(
    options: Mapping[str, object], mode: str, env: Mapping[str, str]
) -> InductorOptionCheck:
    """Check ``options`` against this torch's ``torch._inductor.config`` and ``mode``.

    ``torch.compile(mode=...)`` applies the mode's own options over the global
    config for the graphs it compiles, so an option the mode sets to another
    value would be silently ignored. Checked in a child with the job's
    environment (the torch the script will import), so the entrypoint itself
    never imports torch.
    """
    child_env = {k: v for k, v in without_secrets(env).items() if k != METRICS_DIR_ENV}
    done = subprocess.run(
        [sys.executable, "-c", _INDUCTOR_OPTIONS, json.dumps(list(options)), mode],
        env=child_env,
        capture_output=True,
        text=True,
        timeout=_TIMEOUT_S,
    )
    lines = done.stdout.strip().splitlines()
    if done.returncode != 0 or not lines:
        tail = " | ".join((done.stderr or done.stdout).strip().splitlines()[-5:])
        raise RuntimeError(f"could not read torch._inductor.config: {tail}")
    found = json.loads(lines[-1])
    contradicted = {
        str(key): (options[key], value)
        for key, value in found["mode_sets"].items()
        if options[key] != value
    }
    return InductorOptionCheck([str(key) for key in found["unknown"]], contradicted)


if __name__ == "__main__":
    result = probe(sys.argv[1], int(sys.argv[2]))
    print(json.dumps(dataclasses.asdict(result)))
