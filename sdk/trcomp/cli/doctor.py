"""``trcomp doctor``: print what :mod:`trcomp.doctor` finds, exit 1 if a needed part is missing."""

from __future__ import annotations

import argparse
import json
from collections.abc import Sequence
from typing import Any

from trcomp.doctor import MODES, Check

__all__ = ["format_checks", "register", "run"]

_DESCRIPTION = """\
Check this machine for trcomp: installed versions (trcomp, torch, torch-xla,
transformers, the SageMaker SDK and training toolkit), the Docker engine and
compose, the local training image, the devices seen, and the backend that
backend='auto' picks here and on a GPU instance.

What is needed depends on --for:
  (none)   trcomp and the SageMaker SDK
  process  + torch and sagemaker-training    (instance_type='local_process')
  docker   + Docker engine, compose, image    (instance_type='local'/'local_gpu')
  remote   + boto3, AWS credentials, region, a working STS call (ml.* instances)
Exit code 1 when a needed check fails; each failure prints its fix."""


def register(commands: argparse._SubParsersAction) -> argparse.ArgumentParser:  # type: ignore[type-arg]
    """Add ``doctor`` to the ``trcomp`` parser."""
    parser = commands.add_parser(
        "doctor",
        help="check installed versions, Docker, devices and AWS access",
        description=_DESCRIPTION,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument(
        "--for",
        dest="modes",
        action="append",
        choices=MODES,
        default=[],
        help="fail unless this run mode can work here (repeatable)",
    )
    parser.add_argument(
        "--torch",
        action="store_true",
        help="also import torch and list the CUDA devices it sees (takes seconds)",
    )
    parser.add_argument("--json", action="store_true", help="print the checks as JSON")
    parser.set_defaults(func=run)
    return parser


def format_checks(checks: Sequence[Check], failed: Sequence[Check], modes: Sequence[str]) -> str:
    """The human report: one line per check, the fix under each failure."""
    width = max(len(c.name) for c in checks)
    lines = [f"trcomp doctor (needed for: {', '.join(['core', *modes])})"]
    for check in checks:
        if check.ok:
            mark = "ok"
        elif check in failed:
            mark = "FAIL"
        else:
            mark = "--"
        lines.append(f"  {mark:<4}  {check.name:<{width}}  {check.detail}")
        if not check.ok and check.fix:
            lines.append(f"  {'':<4}  {'':<{width}}  fix: {check.fix}")
    if failed:
        lines.append(f"{len(failed)} needed check(s) failed: {', '.join(c.name for c in failed)}")
    else:
        lines.append("everything needed is here")
    return "\n".join(lines)


def run(args: argparse.Namespace) -> int:
    """Run the checks and print them; 0 when nothing needed is missing."""
    from trcomp.doctor import failures, run_checks

    modes: list[str] = list(dict.fromkeys(args.modes))
    checks = run_checks(modes, torch_devices=args.torch)
    failed = failures(checks, modes)
    if args.json:
        report: dict[str, Any] = {
            "modes": modes,
            "ok": not failed,
            "checks": [c.to_dict() for c in checks],
        }
        print(json.dumps(report, indent=2))
    else:
        print(format_checks(checks, failed, modes))
    return 1 if failed else 0
