"""The ``trcomp`` command: chores around compiled training jobs, without writing Python.

``trcomp doctor``, ``trcomp image uri|build|push``, ``trcomp run SCRIPT``,
``trcomp cache withdraw`` and ``trcomp bench``. Every command has ``--help``; the
pages under docs/cli/ show each one with real output.

Exit codes: 0 success, 1 the command failed (the message says why and what to do),
2 bad usage (argparse).
"""

from __future__ import annotations

import argparse
import logging
import subprocess
import sys
from collections.abc import Sequence

from trcomp._version import __version__

__all__ = ["build_parser", "main", "report_error"]

_DESCRIPTION = (
    "trcomp: one switch that compiles SageMaker-style PyTorch training jobs "
    "(torch.compile/inductor or torch-xla). These commands check a machine, build and "
    "push the training image, and submit or run a script through trcomp's estimators."
)


def build_parser() -> argparse.ArgumentParser:
    """The whole ``trcomp`` parser; each command sets ``func(args) -> int``."""
    from trcomp.cli import cache, doctor, image, run
    from trcomp_bench.cli import register as register_bench

    parser = argparse.ArgumentParser(
        prog="trcomp",
        description=_DESCRIPTION,
        epilog="Run `trcomp COMMAND --help` for a command's options.",
    )
    parser.add_argument("--version", action="version", version=f"trcomp {__version__}")
    parser.add_argument("-v", "--verbose", action="store_true", help="log what trcomp does (INFO)")
    commands = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)
    doctor.register(commands)
    image.register(commands)
    run.register(commands)
    cache.register(commands)
    register_bench(commands)
    return parser


def report_error(exc: BaseException) -> None:
    """Print an error and the notes trcomp added to it (no traceback)."""
    print(f"error: {type(exc).__name__}: {exc}", file=sys.stderr)
    for note in getattr(exc, "__notes__", []):
        print(note, file=sys.stderr)


def _configure_logging(verbose: bool) -> None:
    """Warnings only, unless ``--verbose``; set before the SDK's import-time basicConfig(INFO)."""
    level = logging.INFO if verbose else logging.WARNING
    logging.basicConfig(level=level, format="%(levelname)s %(name)s: %(message)s")
    if not verbose:
        # The SDK prints where it looked for its config files to stdout on every session;
        # stdout is for the command's answer (`$(trcomp image uri)` must be a URI).
        logging.getLogger("sagemaker.config").setLevel(logging.WARNING)
        # Its telemetry call logs a traceback when it cannot reach the internet; the job
        # is not affected, so say nothing.
        logging.getLogger("sagemaker.telemetry").setLevel(logging.CRITICAL)


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the ``trcomp`` console script; returns the exit code."""
    parser = build_parser()
    args = parser.parse_args(None if argv is None else list(argv))
    _configure_logging(args.verbose)
    from botocore.exceptions import BotoCoreError, ClientError

    from trcomp.contract.errors import TrcompError

    try:
        return int(args.func(args))
    except (TrcompError, ClientError, BotoCoreError) as exc:
        report_error(exc)
        return 1
    except subprocess.CalledProcessError as exc:
        command = " ".join(str(part) for part in exc.cmd[:2])
        print(
            f"error: `{command}` failed with exit code {exc.returncode}; its output is above",
            file=sys.stderr,
        )
        return 1
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
        return 130


if __name__ == "__main__":
    sys.exit(main())
