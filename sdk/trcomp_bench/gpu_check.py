"""``make gpu-check``: the GPU path checked on a real NVIDIA machine, in under 10 minutes.

    python -m trcomp_bench.gpu_check --out gpu-check        # on a GPU machine
    python -m trcomp_bench.gpu_check --dry-run --out /tmp/x  # the same code on CPU

Checks run cheapest first, each in its own process with its own time cap,
inside an overall budget; a check that would not fit is recorded as skipped.
Every result is written at once to ``<out>/gpu-check.json`` and ``.md``
(versions and GPU names first), so a run cut short keeps what it measured:

1. ``environment``: torch, triton, CUDA, NCCL and driver versions, GPU names;
2. ``visible-devices``: trcomp's GPU count against torch's, under several
   ``CUDA_VISIBLE_DEVICES`` (indices, reordered, a UUID, an invalid entry);
3. ``probe``: the entrypoint's start-up probe compiling a tiny graph on the
   GPU, and the same with no C compiler, which must fail with the reason;
4. ``engines``: one GPU, every engine of ``gpu_check_body.ENGINES`` (eager,
   inductor, inductor with reduce-overhead plus options): first step, steady
   step, loss against eager;
5. ``step-metric``: trcomp's steady-step metric (metrics hook, CUDA events)
   against a synchronized measurement, under CUDA graphs;
6. ``ddp``: two GPUs under torchrun with NCCL: ``runtime.device()`` sets each
   rank's device; DDP step time against compute alone and all-reduce alone
   (overlap), for eager, ``DDP(compile(m))`` and ``compile(DDP(m))``;
7. ``zero-code``: a plain loop (no torch.compile) under the start-up hook with
   the environment the entrypoint builds for this GPU host and
   ``backend="auto"``: what the hook compiled, and the speed-up over eager the
   job measured of itself (and which one it kept).

Needs torch (and pydantic, for ``trcomp.runtime``); run from a checkout with
``PYTHONPATH=sdk:container`` or with trcomp installed.
"""

from __future__ import annotations

import argparse
import os
import shutil
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from trcomp.contract.env import BACKEND_ENV, CONFIG_ENV, METRICS_DIR_ENV, PREFIX
from trcomp_bench.runs import (
    Job,
    ResultLog,
    add_job_arguments,
    collect_versions,
    marked_json,
    run_capped,
    run_jobs,
)
from trcomp_bench.versions import run_on_torch

__all__ = ["CHECKS", "Check", "main", "render"]

BUDGET_S = 570.0


@dataclass(frozen=True)
class Check:
    """One check: its name, its time cap, and the function that runs it."""

    name: str
    cap_s: float
    run: Callable[[argparse.Namespace, float], dict[str, Any]]


def _env(args: argparse.Namespace, **extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(PREFIX)}
    env.update(USE_TORCH_XLA="0", PYTHONUNBUFFERED="1", **extra)
    # --compile-cache: a kept cache (the tests' warm one); else empty ones in this run's scratch.
    kept = args.compile_cache
    env["TORCHINDUCTOR_CACHE_DIR"] = str(kept or args.scratch / "inductor")
    env["TRITON_CACHE_DIR"] = str(kept / "triton" if kept else args.scratch / "triton")
    return env


def _body(args: argparse.Namespace, part: str, cap: float, env: dict[str, str]) -> dict[str, Any]:
    command = [sys.executable, "-m", "trcomp_bench.gpu_check_body", part]
    command += ["--steps", str(args.steps)] + (["--dry-run"] if args.dry_run else [])
    done = run_capped(command, cap, env=env)
    return _outcome(done, marked_json(done.stdout))


def _outcome(done: Any, body: Any) -> dict[str, Any]:
    result: dict[str, Any] = {"seconds": round(done.seconds, 1)}
    if done.timed_out:
        return {**result, "status": "timed out", "stderr_tail": done.stderr[-1500:]}
    if done.returncode != 0 or body is None:
        return {
            **result,
            "status": f"failed (exit {done.returncode})",
            "stderr_tail": done.stderr[-1500:],
        }
    return {**result, "status": "ok", **body}


def check_environment(args: argparse.Namespace, cap: float) -> dict[str, Any]:
    return {"status": "ok", **collect_versions(timeout_s=cap)}


_COUNT = "import torch; print(torch.cuda.device_count() if torch.cuda.is_available() else 0)"


def check_visible_devices(args: argparse.Namespace, cap: float) -> dict[str, Any]:
    """trcomp's count (nvidia-smi + CUDA_VISIBLE_DEVICES) must equal torch's, case by case."""
    from trcomp_container.devices import detect_devices, list_gpus, parse_gpu_listing

    listing = list_gpus() or ""
    gpus = parse_gpu_listing(listing)
    selectors: list[str | None] = [None]
    if gpus:
        selectors += ["0", f"0,{len(gpus) + 5}", gpus[0].uuid[:12]]
    if len(gpus) >= 2:
        selectors += ["1,0"]
    cases = []
    deadline = time.monotonic() + cap
    for selector in selectors:
        extra = {} if selector is None else {"CUDA_VISIBLE_DEVICES": selector}
        env = {k: v for k, v in _env(args).items() if k != "CUDA_VISIBLE_DEVICES"} | extra
        trcomp_count = detect_devices(len(gpus), env, listing).gpus
        done = run_capped([sys.executable, "-c", _COUNT], deadline - time.monotonic(), env=env)
        torch_count = int(done.stdout.strip() or -1) if done.returncode == 0 else None
        cases.append(
            {"CUDA_VISIBLE_DEVICES": selector, "trcomp": trcomp_count, "torch": torch_count}
        )
    agree = all(case["trcomp"] == case["torch"] for case in cases)
    return {"status": "ok" if agree else "MISMATCH", "host_gpus": len(gpus), "cases": cases}


def check_probe(args: argparse.Namespace, cap: float) -> dict[str, Any]:
    """The entrypoint's probe on this machine, then with no C compiler (it must say so)."""
    from trcomp_container.devices import detect_devices
    from trcomp_container.probe import run_probe

    gpus = 0 if args.dry_run else detect_devices(len(_listed()), os.environ, None).gpus
    backend = "inductor"
    start = time.monotonic()
    if args.dry_run:  # the entrypoint's CPU check is in-process; run the compiling one
        from trcomp_container.probe import compile_tiny_graph

        good = compile_tiny_graph("cpu")
    else:
        good = run_probe(backend, gpus, _env(args))
    seconds = time.monotonic() - start
    fresh = tempfile.mkdtemp(dir=args.scratch)
    broken_env = _env(args, CC="/nonexistent/cc", CXX="/nonexistent/c++")
    broken_env.update(TORCHINDUCTOR_CACHE_DIR=f"{fresh}/i", TRITON_CACHE_DIR=f"{fresh}/t")
    broken = run_probe(backend, gpus, broken_env)
    return {
        "status": "ok" if good.ok and not broken.ok else "FAILED",
        "gpus": gpus,
        "probe": {
            "ok": good.ok,
            "reason": good.reason,
            "hardware": good.hardware,
            "gpus_seen": good.gpus_seen,
            "seconds": round(seconds, 1),
        },
        "probe_without_c_compiler": {"ok": broken.ok, "reason": broken.reason[:600]},
    }


def _listed() -> list[Any]:
    from trcomp_container.devices import list_gpus, parse_gpu_listing

    return parse_gpu_listing(list_gpus() or "")


def check_engines(args: argparse.Namespace, cap: float) -> dict[str, Any]:
    return _body(args, "engines", cap, _env(args, CUDA_VISIBLE_DEVICES="0"))


def check_step_metric(args: argparse.Namespace, cap: float) -> dict[str, Any]:
    """The hook's steady step (what summary.json reports) against the synchronized truth."""
    from trcomp_container.environment import HOOK_DIR
    from trcomp_container.summary import read_rank_records, steady_step_time

    ranks = args.scratch / "ranks"
    shutil.rmtree(ranks, ignore_errors=True)
    path = os.pathsep.join(filter(None, [str(HOOK_DIR), os.environ.get("PYTHONPATH")]))
    env = _env(args, CUDA_VISIBLE_DEVICES="0", PYTHONPATH=path, **{METRICS_DIR_ENV: str(ranks)})
    result = _body(args, "step-metric", cap, env)
    records = read_rank_records(ranks) if ranks.is_dir() else []
    if result["status"] != "ok":
        return result
    if not records:
        return {**result, "status": "FAILED: the metrics hook wrote no record"}
    record = records[0]
    intervals = record.step_intervals_s
    metric = steady_step_time(intervals)  # what summary.json reports: a median
    timed = intervals[-result["steps_timed"] :]
    mean = sum(timed) / len(timed) if timed else None  # over the same steps as the reference
    reference = result["reference_step_s"]
    result.update(
        hook_steps=record.steps,
        hook_step_clock=record.step_clock,
        hook_step_s=metric,
        hook_mean_step_s=mean,
        metric_over_reference=(metric / reference) if metric and reference else None,
        mean_over_reference=(mean / reference) if mean and reference else None,
        unsynchronized_over_reference=result["unsynchronized_cpu_step_s"] / reference,
    )
    return result


def check_ddp(args: argparse.Namespace, cap: float) -> dict[str, Any]:
    if not args.dry_run and len(_listed()) < 2:
        return {"status": "skipped: fewer than 2 GPUs"}
    command = [sys.executable, "-m", "torch.distributed.run", "--standalone"]
    command += ["--nproc-per-node", "2", "-m", "trcomp_bench.gpu_check_body", "ddp"]
    command += ["--steps", str(args.steps)]
    command += ["--dry-run"] if args.dry_run else []
    env = _env(args) if args.dry_run else _env(args, CUDA_VISIBLE_DEVICES="0,1")
    done = run_capped(command, cap, env=env)
    return _outcome(done, marked_json(done.stdout))


def zero_code_env(scratch: Path, gpus: int, metrics_dir: Path) -> dict[str, str]:
    """What the entrypoint sets for a plain loop under ``backend="auto"`` on this host.

    The start-up hook on ``PYTHONPATH``, the resolved config and the metrics
    directory: a child with these compiles its model with no code change and
    measures its own speed-up over eager (its record lands in ``metrics_dir``).
    """
    from trcomp.contract.config import TrainingCompilerConfig
    from trcomp_container.devices import Devices
    from trcomp_container.environment import build_environment
    from trcomp_container.job import JobPaths

    shutil.rmtree(metrics_dir, ignore_errors=True)
    built = build_environment(
        config=TrainingCompilerConfig(backend="auto"),
        backend="inductor",
        engine="inductor",
        devices=Devices(gpus=gpus, host_gpus=gpus),
        paths=JobPaths.under(scratch / "zero-code-ml"),
        base_env={"PYTHONPATH": os.environ.get("PYTHONPATH", "")},
        metrics_dir=metrics_dir,
        scratch_dir=scratch / "zero-code-scratch",
    )
    keep = (CONFIG_ENV, BACKEND_ENV, METRICS_DIR_ENV, "PYTHONPATH")
    return {key: built[key] for key in keep}


def job_speedup(metrics_dir: Path) -> dict[str, Any] | None:
    """What the hook's record in ``metrics_dir`` says the child compiled and measured."""
    from trcomp_container.summary import read_rank_records

    records = read_rank_records(metrics_dir) if metrics_dir.is_dir() else []
    if not records:
        return None
    record = records[0]
    auto, speedup = record.autocompile, record.speedup
    decision = speedup.decision if speedup is not None else None
    return {
        "compiled_modules": [m.to_json() for m in auto.modules] if auto is not None else None,
        "graphs": record.compile.graphs if record.compile is not None else None,
        "speedup_vs_eager": decision.speedup if decision else None,
        "kept": decision.keep if decision else None,
        "eager_step_s": decision.eager_step_s if decision else None,
        "compiled_step_s": decision.compiled_step_s if decision else None,
        "measurement": speedup.to_json() if speedup is not None else None,
        "step_clock": record.step_clock,
    }


def check_zero_code(args: argparse.Namespace, cap: float) -> dict[str, Any]:
    """The zero-code compile and the job's own speed-up measurement, on this GPU."""
    ranks = args.scratch / "zero-code-ranks"
    hooked = zero_code_env(args.scratch, 0 if args.dry_run else 1, ranks)
    env = _env(args, CUDA_VISIBLE_DEVICES="0", **hooked)
    result = _body(args, "plain-loop", cap, env)
    if result["status"] != "ok":
        return result
    found = job_speedup(ranks)
    if found is None:
        return {**result, "status": "FAILED: the metrics hook wrote no record"}
    return {**result, **found}


CHECKS = [
    Check("environment", 90, check_environment),
    Check("visible-devices", 90, check_visible_devices),
    Check("probe", 150, check_probe),
    Check("engines", 200, check_engines),
    Check("step-metric", 120, check_step_metric),
    Check("ddp", 240, check_ddp),
    Check("zero-code", 150, check_zero_code),
]


def render(log: ResultLog) -> str:
    """The markdown report: what ran where, then one section per check."""
    import json

    meta = log.meta
    lines = [
        "# trcomp GPU check",
        "",
        f"- date: {meta.get('date')}; dry run: {meta.get('dry_run')}",
        f"- torch asked for: {meta.get('torch_version') or 'this Python'}; "
        f"python: {meta.get('python')}",
        f"- GPUs: {meta.get('versions', {}).get('gpus')}; driver {meta.get('versions', {}).get('driver')}",  # noqa: E501
        f"- versions: {json.dumps({k: v for k, v in meta.get('versions', {}).items() if k not in ('gpus',)})}",  # noqa: E501
        "",
    ]
    for entry in log.entries:
        lines += [f"## {entry['check']}: {entry.get('status')}", "", "```json"]
        body = {k: v for k, v in entry.items() if k not in ("check", "status")}
        lines += [json.dumps(body, indent=1, default=str)[:6000], "```", ""]
    return "\n".join(lines)


def _runner(
    check: Check, args: argparse.Namespace, meta: dict[str, Any]
) -> Callable[[float], dict[str, Any]]:
    def run(cap: float) -> dict[str, Any]:
        result = check.run(args, cap)
        if check.name == "environment":  # the report's head shows them
            meta["versions"] = {k: v for k, v in result.items() if k not in ("status", "seconds")}
        return result

    return run


def main(argv: list[str] | None = None) -> int:
    """Run the checks in order within the budget; 0 when every check ran and passed."""
    parser = argparse.ArgumentParser(prog="python -m trcomp_bench.gpu_check", description=__doc__)
    add_job_arguments(
        parser, out="gpu-check", out_help="directory for gpu-check.json/.md", budget_s=BUDGET_S
    )
    parser.add_argument("--only", default="", help="comma-separated check names")
    parser.add_argument(
        "--compile-cache",
        type=Path,
        metavar="DIR",
        help="inductor's (and triton's) cache dir for the checks' compiles, kept as it is "
        "(default: an empty one per run, so every first step is a cold compile); the probe "
        "without a C compiler always gets an empty one",
    )
    args = parser.parse_args(argv)
    run_on_torch(
        args.torch_version, "trcomp_bench.gpu_check", sys.argv[1:] if argv is None else argv
    )
    args.scratch = Path(tempfile.mkdtemp(prefix="trcomp-gpu-check-"))
    meta = {
        "date": time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime()),
        "dry_run": args.dry_run,
        "torch_version": args.torch_version,  # asked for; versions.torch is what ran
        "python": sys.executable,
    }
    log = ResultLog(Path(args.out) / "gpu-check", meta, render)
    deadline = time.monotonic() + args.budget_s
    chosen = [c for c in CHECKS if not args.only or c.name in args.only.split(",")]
    jobs = [Job(c.name, {"check": c.name}, c.cap_s, _runner(c, args, meta)) for c in chosen]
    try:
        failed = run_jobs(
            jobs, log, deadline=deadline, min_cap_s=10, skipped="skipped: budget spent",
            tag="gpu_check",
        )  # fmt: skip
    finally:
        shutil.rmtree(args.scratch, ignore_errors=True)
    print(f"[gpu_check] results in {log.stem}.json and .md", file=sys.stderr)
    return 1 if failed else 0


if __name__ == "__main__":
    raise SystemExit(main())
