"""``trcomp doctor``: what this machine has for running trcomp jobs, and what is missing.

Each check is a :class:`Check`: a name, whether it passed, what was found, the fix,
and the run modes that need it (``process``, ``docker``, ``remote``). A failed check
only fails the doctor when it is needed for a mode asked for with ``--for``; with
no ``--for`` only trcomp's own client requirements are needed. The checks do not
import torch unless asked (``torch_devices=True``): that takes seconds.
"""

from __future__ import annotations

import importlib.metadata
import shutil
import subprocess
from collections.abc import Callable, Iterable, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

__all__ = [
    "MODES",
    "PACKAGES",
    "Check",
    "backend_choices",
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

Runner = Callable[[Sequence[str]], "tuple[int, str]"]


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


def _run(command: Sequence[str], timeout: float = 20.0) -> tuple[int, str]:
    """Run a command; (exit code, stdout+stderr). 127 when it is not installed."""
    if shutil.which(command[0]) is None:
        return 127, f"{command[0]}: not found"
    try:
        proc = subprocess.run(
            list(command), capture_output=True, text=True, timeout=timeout, check=False
        )
    except subprocess.TimeoutExpired:
        return 124, f"{' '.join(command)} did not answer within {timeout:.0f} s"
    return proc.returncode, (proc.stdout + proc.stderr).strip()


def check_packages(version: Callable[[str], str] = importlib.metadata.version) -> list[Check]:
    """Installed versions of trcomp and what it uses (read from metadata, nothing imported)."""
    checks = []
    for name, (needed, fix) in PACKAGES.items():
        try:
            checks.append(Check(name, True, version(name), needed_for=needed))
        except importlib.metadata.PackageNotFoundError:
            checks.append(Check(name, False, "not installed", fix, needed))
    return checks


def check_docker(image: str, run: Runner = _run) -> list[Check]:
    """The Docker engine, compose (as SageMaker local mode calls it) and the local image."""
    docker = frozenset({"docker"})
    code, out = run(["docker", "info", "--format", "{{.ServerVersion}}"])
    engine_ok = code == 0 and bool(out)
    checks = [
        Check(
            "docker engine",
            engine_ok,
            f"server {out}" if engine_ok else (out.splitlines() or ["no answer"])[-1],
            "install Docker Engine and start it (`make docker-engine` on Debian/Ubuntu); "
            "your user must be allowed to use /var/run/docker.sock",
            docker,
        )
    ]
    code, out = run(["docker", "compose", "version", "--short"])
    if code == 0:
        compose = Check("docker compose", True, f"docker compose {out}", needed_for=docker)
    else:
        code, out = run(["docker-compose", "version", "--short"])
        compose = Check(
            "docker compose",
            code == 0,
            f"docker-compose {out}" if code == 0 else "neither `docker compose` nor docker-compose",
            "install the compose plugin or docker-compose (apt-get install docker-compose)",
            docker,
        )
    checks.append(compose)
    if engine_ok:
        code, out = run(["docker", "image", "inspect", "--format", "{{.Id}}", image])
        checks.append(
            Check(
                "local image",
                code == 0,
                f"{image} {out[:19]}" if code == 0 else f"{image} not built",
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


def check_devices(run: Runner = _run, torch_devices: bool = False) -> tuple[list[Check], Any]:
    """The accelerators seen here (as the container sees them: nvidia-smi, TPU chips)."""
    from trcomp_container.devices import detect_devices

    code, out = run(["nvidia-smi", "-L"])
    gpus = [line for line in out.splitlines() if line.startswith("GPU ")] if code == 0 else []
    devices = detect_devices(len(gpus))
    detail = str(devices)
    if gpus:
        detail += ": " + "; ".join(g.split(" (UUID")[0] for g in gpus)
    checks = [Check("devices", True, detail)]
    if torch_devices:
        checks.append(Check("torch devices", True, _torch_gpus()))
    return checks, devices


def backend_choices(devices: Any) -> list[Check]:
    """What ``backend='auto'`` resolves to here and on a GPU instance (the container's rule)."""
    from trcomp.config import TrainingCompilerConfig
    from trcomp_container.backends import resolve_backend
    from trcomp_container.devices import Devices

    config = TrainingCompilerConfig()
    here = resolve_backend(config, devices)
    gpu = resolve_backend(config, Devices(gpus=8))
    return [
        Check("backend here", True, f"auto -> {here} ({devices})"),
        Check("backend on GPU instance", True, f"auto -> {gpu} (e.g. ml.g5, ml.p4d, ml.p5)"),
    ]


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
    run: Runner = _run,
) -> list[Check]:
    """Every check; Docker only when asked for docker or found, AWS only for remote."""
    from trcomp.images import local_image_uri

    modes = set(modes)
    checks = check_packages()
    if "docker" in modes or shutil.which("docker"):
        checks += check_docker(local_image_uri(), run)
    device_checks, devices = check_devices(run, torch_devices)
    checks += device_checks + backend_choices(devices)
    if "remote" in modes:
        checks += check_aws()
    return checks


def failures(checks: Iterable[Check], modes: Iterable[str] = ()) -> list[Check]:
    """The failed checks that are needed for ``modes`` (and for trcomp itself)."""
    wanted = {CORE, *modes}
    return [c for c in checks if not c.ok and c.needed_for & wanted]
