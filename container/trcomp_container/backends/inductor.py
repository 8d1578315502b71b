"""Environment for torch.compile with inductor.

Unmodified HF Trainer and Accelerate scripts compile through the
``ACCELERATE_DYNAMO_*`` variables; :mod:`trcomp.runtime` scripts through
``TRCOMP_CONFIG``. Only fields the user changed from the defaults are passed.
``inductor_options`` reach both kinds the same way, once: the start-up hook
applies them (from ``TRCOMP_CONFIG``) to ``torch._inductor.config`` in every process;
``TRCOMP_INDUCTOR_OPTIONS`` echoes them for scripts.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

from trcomp.contract.config import TrainingCompilerConfig
from trcomp.contract.keys import INDUCTOR_OPTIONS_ENV

__all__ = [
    "cache_environment",
    "compile_threads",
    "debug_environment",
    "environment",
    "pgo_environment",
]


def environment(config: TrainingCompilerConfig) -> dict[str, str]:
    """Variables that turn torch.compile on for Accelerate/HF Trainer scripts."""
    env = {
        # transformers treats an installed torch-xla as "use XLA" unless told otherwise.
        "USE_TORCH_XLA": "0",
        "ACCELERATE_DYNAMO_BACKEND": "INDUCTOR",
    }
    if config.mode != "default":
        env["ACCELERATE_DYNAMO_MODE"] = config.mode
    if config.fullgraph:
        env["ACCELERATE_DYNAMO_USE_FULLGRAPH"] = "True"
    if config.dynamic is not None:
        env["ACCELERATE_DYNAMO_USE_DYNAMIC"] = str(config.dynamic)
    if config.regional:
        # Accelerate compiles each repeated block (and each other leaf) on its own;
        # only when asked: its steady step was slower than the whole model's (docs/benchmarks.md).
        env["ACCELERATE_DYNAMO_USE_REGIONAL_COMPILATION"] = "True"
    if config.inductor_options:
        env[INDUCTOR_OPTIONS_ENV] = json.dumps(config.inductor_options, sort_keys=True)
    return env


def cache_environment(cache_dir: Path) -> dict[str, str]:
    """Inductor's FX graph and AOTAutograd caches and Triton's kernels under ``cache_dir``."""
    return {
        "TORCHINDUCTOR_CACHE_DIR": str(cache_dir / "inductor"),
        "TRITON_CACHE_DIR": str(cache_dir / "triton"),
        "TORCHINDUCTOR_FX_GRAPH_CACHE": "1",
        "TORCHINDUCTOR_AUTOGRAD_CACHE": "1",
    }


def pgo_environment(lineage: str, entry_point: str) -> dict[str, str]:
    """``TORCH_COMPILE_JOB_ID``: one id for every job of a script on one cache location.

    Dynamo's profile-guided dynamic shapes (PGO) save which dimensions changed
    under ``<TORCHINDUCTOR_CACHE_DIR>/dynamo/``, keyed by this id, only when an
    id is set. With it stable, the state is kept with the cache and the next job
    compiles those dimensions dynamic at once instead of recompiling.
    """
    digest = hashlib.sha256(f"{lineage}\n{entry_point}".encode()).hexdigest()[:16]
    return {"TORCH_COMPILE_JOB_ID": f"trcomp-{digest}"}


def debug_environment(compiler_dir: Path) -> dict[str, str]:
    """Graph-break and recompile logs, FX graphs and generated code under ``compiler_dir``."""
    return {
        "TORCH_LOGS": "graph_breaks,recompiles,perf_hints",
        "TORCH_LOGS_OUT": str(compiler_dir / "torch_logs.txt"),
        "TORCH_COMPILE_DEBUG": "1",
        "TORCH_COMPILE_DEBUG_DIR": str(compiler_dir / "inductor_debug"),
        "TORCH_TRACE": str(compiler_dir / "trace"),
    }


def compile_threads(num_cpus: int, nproc_per_node: int) -> dict[str, str]:
    """``TORCHINDUCTOR_COMPILE_THREADS``: the host's CPUs shared by its ranks.

    Each rank would otherwise start up to 32 compile workers: 256 on an 8-GPU host.
    """
    return {"TORCHINDUCTOR_COMPILE_THREADS": str(max(1, num_cpus // max(1, nproc_per_node)))}
