"""``trcomp run SCRIPT``: submit or run a training script through trcomp's estimators.

The arguments become an estimator exactly as Python code would build it
(:func:`estimator_spec`, pure), then ``fit()`` runs: on SageMaker for ``ml.*``
instance types, in Docker for ``local``/``local_gpu``, as a local process for
``local_process``.
"""

from __future__ import annotations

import argparse
import json
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from trcomp._sdk_compat import current_job_name
from trcomp.contract.env import ROLE_ENV
from trcomp.contract.errors import TrcompError
from trcomp.contract.instances import DOCKER_LOCAL_MODES, PROCESS_MODE

__all__ = ["LOCAL_ROLE", "EstimatorSpec", "estimator_spec", "parse_pairs", "register", "run"]

LOCAL_ROLE = "arn:aws:iam::111111111111:role/trcomp-local"
"""Stands in for an execution role in local modes, where no AWS call uses it."""

_LOCAL = (PROCESS_MODE, *DOCKER_LOCAL_MODES)

_DESCRIPTION = """\
Run a training script with the training compiler, without writing Python: the
options build a trcomp.PyTorch (or trcomp.HuggingFace) estimator and call fit().

  trcomp run train.py                                   # this machine, no Docker
  trcomp run train.py --instance-type local --input train=file://data
  trcomp run train.py --instance-type ml.g5.2xlarge --role ARN \\
      --input train=s3://bucket/train --hp epochs=3 --no-wait

Hyperparameter values are read as JSON when they parse (3, 0.1, true, "x"), else as
strings. The role defaults to $TRCOMP_ROLE; local modes need none."""


def register(commands: argparse._SubParsersAction) -> argparse.ArgumentParser:  # type: ignore[type-arg]
    """Add ``run`` to the ``trcomp`` parser."""
    parser = commands.add_parser(
        "run",
        help="submit or run a training script with the compiler",
        description=_DESCRIPTION,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("script", help="the training script (entry point)")
    parser.add_argument(
        "--source-dir", help="directory shipped with the script (default: the script's directory)"
    )
    parser.add_argument(
        "--instance-type",
        default="local_process",
        help="local_process (default), local, local_gpu or an ml.* type",
    )
    parser.add_argument("--instance-count", type=int, default=1, help="instances (default: 1)")
    parser.add_argument(
        "--compiler",
        choices=("auto", "inductor", "xla", "off"),
        default="auto",
        help="compiler backend, or off to run eager (default: auto)",
    )
    parser.add_argument("--debug", action="store_true", help="keep compiler logs and graphs")
    parser.add_argument(
        "--no-cache",
        action="store_true",
        help="no compile cache (and no default checkpoint location)",
    )
    parser.add_argument(
        "--framework",
        choices=("pytorch", "huggingface"),
        default="pytorch",
        help="estimator class (default: pytorch)",
    )
    parser.add_argument(
        "--hp",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="hyperparameter for the script (repeatable)",
    )
    parser.add_argument(
        "--input",
        action="append",
        default=[],
        metavar="NAME=URI",
        help="input channel, s3:// or file:// (repeatable)",
    )
    parser.add_argument(
        "--role",
        default=os.environ.get(ROLE_ENV),
        help="SageMaker execution role ARN (default: $TRCOMP_ROLE)",
    )
    parser.add_argument("--output-path", help="where model and output go (s3:// or file://)")
    parser.add_argument("--checkpoint-s3-uri", help="checkpoint (and compile cache) location")
    parser.add_argument("--image-uri", help="training image (default: trcomp's)")
    parser.add_argument("--base-job-name", help="prefix of the job name")
    parser.add_argument("--job-name", help="exact job name")
    parser.add_argument("--max-run", type=int, help="maximum run time in seconds")
    parser.add_argument(
        "--no-wait", action="store_true", help="return once the job is submitted (remote jobs)"
    )
    parser.set_defaults(func=run)
    return parser


def parse_pairs(pairs: list[str], what: str, decode: bool) -> dict[str, Any]:
    """``["a=1", "b=x"]`` -> ``{"a": 1, "b": "x"}`` (values JSON-decoded when ``decode``)."""
    parsed: dict[str, Any] = {}
    for pair in pairs:
        key, sep, value = pair.partition("=")
        if not sep or not key:
            raise TrcompError(f"{what} {pair!r} is not KEY=VALUE: write it as name=value")
        if decode:
            try:
                parsed[key] = json.loads(value)
            except json.JSONDecodeError:
                parsed[key] = value
        else:
            parsed[key] = value
    return parsed


@dataclass(frozen=True)
class EstimatorSpec:
    """What ``trcomp run`` builds: the estimator class name, its arguments and fit's inputs."""

    framework: str
    kwargs: dict[str, Any]
    inputs: dict[str, str] | None


def estimator_spec(args: argparse.Namespace) -> EstimatorSpec:
    """Turn parsed ``trcomp run`` arguments into estimator arguments (pure; no AWS calls)."""
    from trcomp.config import TrainingCompilerConfig

    script = Path(args.script)
    if args.source_dir:
        source = Path(args.source_dir)
        entry = script.relative_to(source) if script.is_relative_to(source) else script
    else:
        source, entry = script.parent if str(script.parent) else Path("."), Path(script.name)
    if not (source / entry).is_file():
        raise TrcompError(f"no script {source / entry}: pass the path of an existing file")
    local = args.instance_type in _LOCAL
    role = args.role or (LOCAL_ROLE if local else None)
    if role is None:
        raise TrcompError(
            f"--instance-type {args.instance_type} runs on SageMaker, which needs an execution "
            "role: pass --role arn:aws:iam::<account>:role/<name> or set TRCOMP_ROLE"
        )
    compiler = TrainingCompilerConfig(
        enabled=args.compiler != "off",
        backend="auto" if args.compiler == "off" else args.compiler,
        debug=args.debug,
        cache=not args.no_cache,
    )
    kwargs: dict[str, Any] = {
        "entry_point": entry.as_posix(),
        "source_dir": str(source),
        "role": role,
        "instance_type": args.instance_type,
        "instance_count": args.instance_count,
        "hyperparameters": parse_pairs(args.hp, "--hp", decode=True),
        "compiler_config": compiler,
    }
    optional = {
        "output_path": args.output_path,
        "checkpoint_s3_uri": args.checkpoint_s3_uri,
        "image_uri": args.image_uri,
        "base_job_name": args.base_job_name,
        "max_run": args.max_run,
    }
    kwargs.update({k: v for k, v in optional.items() if v is not None})
    inputs = parse_pairs(args.input, "--input", decode=False) or None
    return EstimatorSpec(args.framework, kwargs, inputs)


def run(args: argparse.Namespace) -> int:
    """Build the estimator and fit it; print the job name and where to look next."""
    import trcomp

    spec = estimator_spec(args)
    cls = trcomp.HuggingFace if spec.framework == "huggingface" else trcomp.PyTorch
    estimator = cls(**spec.kwargs)
    local = args.instance_type in _LOCAL
    wait = local or not args.no_wait  # local jobs always run to the end
    estimator.fit(spec.inputs, wait=wait, job_name=args.job_name)
    job = getattr(estimator, "latest_training_job", None)
    name = getattr(job, "name", None) or current_job_name(estimator)
    if local:
        print(f"trcomp run: job {name} finished ({args.instance_type})")
    elif wait:
        print(f"job {name} finished; model: {estimator.model_data}")
    else:
        print(f"submitted {name} ({args.instance_count} x {args.instance_type})")
        print(f"  image:      {estimator.image_uri}")
        submitted = estimator.latest_job_spec
        if submitted is not None and submitted.checkpoint_s3_uri:
            print(f"  checkpoint: {submitted.checkpoint_s3_uri}")
        print(f"  follow:     aws sagemaker describe-training-job --training-job-name {name}")
    return 0
