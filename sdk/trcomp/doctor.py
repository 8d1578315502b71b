"""``trcomp doctor``: what this machine has for running trcomp jobs, and what is missing.

Each check is a :class:`Check`: a name, whether it passed, what was found, the fix,
and the run modes that need it (``process``, ``docker``, ``remote``). A failed check
only fails the doctor when it is needed for a mode asked for with ``--for``; with
no ``--for`` only trcomp's own client requirements are needed. The checks do not
import torch unless asked (``torch_devices=True``): that takes seconds.

Docker is asked through :mod:`trcomp.docker_cli`, the same calls local mode's
preflight makes, so the two agree. The devices and the backend ``auto`` picks
come from the container's own rule, run in a child
(``python -m trcomp_container.backends --json``): the SDK never imports the
container package.
"""

from __future__ import annotations

import importlib.metadata
import json
import shutil
import subprocess
import sys
from collections.abc import Callable, Iterable
from dataclasses import asdict, dataclass, field
from typing import Any

from trcomp import docker_cli

__all__ = [
    "MODES",
    "PACKAGES",
    "Check",
    "check_aws",
    "check_devices",
    "check_docker",
    "check_packages",
    "failures",
    "run_checks",
]

MODES = ("process", "docker", "remote")
CORE = "core"  # needed whatever the mode

# distribution -> (modes that need it, fix)
PACKAGES: dict[str, tuple[frozenset[str], str]] = {
    "trcomp": (frozenset({CORE}), "pip install trcomp"),
    "sagemaker": (frozenset({CORE}), "pip install 'sagemaker>=2.230,<3'"),
    "boto3": (frozenset({"remote"}), "pip install boto3"),
    "torch": (frozenset({"process"}), "pip install 'trcomp[container]' (torch==2.9.0)"),
    "torch-xla": (
        frozenset(),
        "pip install 'trcomp[container]' (torch-xla==2.9.0, for backend='xla')",
    ),
    "sagemaker-training": (
        frozenset({"process"}),
        "pip install 'trcomp[container]' (sagemaker-training, needs gcc and Python headers)",
    ),
    "transformers": (frozenset(), "pip install 'trcomp[hf]' (for Hugging Face scripts)"),
    "accelerate": (frozenset(), "pip install 'trcomp[hf]' (for Hugging Face scripts)"),
}


@dataclass(frozen=True)
class Check:
    """One finding. ``needed_for`` holds modes (and ``core``) for which a failure is fatal."""

    name: str
    ok: bool
    detail: str
    fix: str = ""
    needed_for: frozenset[str] = field(default_factory=frozenset)

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready form (``needed_for`` sorted)."""
        data = asdict(self)
        data["needed_for"] = sorted(self.needed_for)
        return data


def check_packages(version: Callable[[str], str] = importlib.metadata.version) -> list[Check]:
    """Installed versions of trcomp and what it uses (read from metadata, nothing imported)."""
    checks = []
    for name, (needed, fix) in PACKAGES.items():
        try:
            checks.append(Check(name, True, version(name), needed_for=needed))
        except importlib.metadata.PackageNotFoundError:
            checks.append(Check(name, False, "not installed", fix, needed))
    return checks


def check_docker(image: str) -> list[Check]:
    """The Docker engine, compose (as SageMaker local mode calls it) and the local image."""
    docker = frozenset({"docker"})
    engine = docker_cli.engine_status()
    checks = [
        Check(
            "docker engine",
            engine.ok,
            f"server {engine.version}" if engine.ok else (engine.problem or ("no answer",))[-1],
            "install Docker Engine and start it (`make docker-engine` on Debian/Ubuntu); "
            "your user must be allowed to use /var/run/docker.sock",
            docker,
        )
    ]
    compose = docker_cli.compose_command()
    checks.append(
        Check(
            "docker compose",
            compose is not None,
            f"{' '.join(compose)} {docker_cli.compose_version(compose)}".strip()
            if compose
            else "neither `docker compose` (v2) nor docker-compose",
            "install the compose plugin or docker-compose (apt-get install docker-compose)",
            docker,
        )
    )
    if engine.ok:
        found = docker_cli.image_id(image)
        checks.append(
            Check(
                "local image",
                found is not None,
                f"{image} {found[:19]}" if found is not None else f"{image} not built",
                "trcomp image build (or `make image`)",
                docker,
            )
        )
    return checks


def _torch_gpus() -> str:
    try:
        import torch
    except ImportError:
        return "torch not installed"
    if not torch.cuda.is_available():
        return f"torch {torch.__version__} sees no CUDA device"
    names = [torch.cuda.get_device_name(i) for i in range(torch.cuda.device_count())]
    return f"torch sees {len(names)} CUDA device(s): {', '.join(names)}"


_NO_CONTAINER_RUNTIME = "container runtime not installed here"


def _container_report(timeout: float = 60.0) -> dict[str, Any] | None:
    """What ``python -m trcomp_container.backends --json`` prints, or None if it cannot run."""
    command = [sys.executable, "-m", "trcomp_container.backends", "--json"]
    try:
        done = subprocess.run(command, capture_output=True, text=True, timeout=timeout, check=False)
        found = json.loads(done.stdout) if done.returncode == 0 else None
    except (OSError, subprocess.TimeoutExpired, json.JSONDecodeError):
        return None
    return found if isinstance(found, dict) else None


def check_devices(torch_devices: bool = False) -> list[Check]:
    """The accelerators seen here and what ``backend='auto'`` resolves to, here and on GPUs.

    Both come from the container's own rule (:func:`_container_report`), run in
    a child from this environment, as process mode runs the container's
    entrypoint. Without the container runtime that is a failed check, needed
    for process mode.
    """
    report = _container_report()
    if report is None:
        return [
            Check(
                "devices",
                False,
                _NO_CONTAINER_RUNTIME,
                "pip install 'trcomp[container]' (process mode runs the container "
                "runtime, trcomp_container, in this environment)",
                frozenset({"process"}),
            )
        ]
    detail = str(report["devices"])
    if report.get("gpu_names"):
        detail += ": " + "; ".join(map(str, report["gpu_names"]))
    checks = [Check("devices", True, detail)]
    if torch_devices:
        checks.append(Check("torch devices", True, _torch_gpus()))
    checks += [
        Check("backend here", True, f"auto -> {report['backend_here']} ({report['devices']})"),
        Check(
            "backend on GPU instance",
            True,
            f"auto -> {report['backend_on_gpu']} (e.g. ml.g5, ml.p4d, ml.p5)",
        ),
    ]
    return checks


def check_aws(session: Any = None, timeout: float = 5.0) -> list[Check]:
    """Credentials and region for remote jobs, and who they are (one STS call, short timeout)."""
    import boto3
    from botocore.config import Config

    remote = frozenset({"remote"})
    session = session or boto3.Session()
    credentials = session.get_credentials()
    region = session.region_name
    checks = [
        Check(
            "aws credentials",
            credentials is not None,
            f"from {credentials.method}" if credentials is not None else "none found",
            "run `aws configure` or `aws sso login`, or set AWS_PROFILE",
            remote,
        ),
        Check(
            "aws region",
            bool(region),
            region or "none set",
            "set AWS_REGION (or region in ~/.aws/config)",
            remote,
        ),
    ]
    if credentials is None or not region:
        return checks
    from trcomp.remote import sts_client

    config = Config(connect_timeout=timeout, read_timeout=timeout, retries={"max_attempts": 1})
    try:
        identity = sts_client(session, config).get_caller_identity()
        checks.append(
            Check(
                "aws identity",
                True,
                f"account {identity['Account']}, {identity['Arn']}",
                needed_for=remote,
            )
        )
    except Exception as exc:  # any failure here is a finding, not a crash
        checks.append(
            Check(
                "aws identity",
                False,
                f"{type(exc).__name__}: {exc}",
                "check network access to STS and that the credentials are valid",
                remote,
            )
        )
    return checks


def run_checks(
    modes: Iterable[str] = (),
    *,
    torch_devices: bool = False,
) -> list[Check]:
    """Every check; Docker only when asked for docker or found, AWS only for remote."""
    from trcomp.image.uris import local_image_uri

    modes = set(modes)
    checks = check_packages()
    if "docker" in modes or shutil.which("docker"):
        checks += check_docker(local_image_uri())
    checks += check_devices(torch_devices)
    if "remote" in modes:
        checks += check_aws()
    return checks


def failures(checks: Iterable[Check], modes: Iterable[str] = ()) -> list[Check]:
    """The failed checks that are needed for ``modes`` (and for trcomp itself)."""
    wanted = {CORE, *modes}
    return [c for c in checks if not c.ok and c.needed_for & wanted]
