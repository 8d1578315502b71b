"""The one place trcomp talks to Docker: the ``docker`` CLI, run as a subprocess.

Preflight, ``trcomp doctor``, local mode's container stops, the image build and
``trcomp image push`` all call these functions, so "is the image here", "which
compose will SageMaker run" and "is the engine up" have one answer each.

:func:`run_docker` never raises for a missing CLI or a hung engine: it answers
exit code 127 (``docker`` not on PATH) or 124 (no answer within the timeout),
with a message in ``stderr``, as a shell would. Callers that cannot go on
without Docker call :func:`require_docker` first, which raises a
:class:`~trcomp.contract.errors.LocalModeError` that says how to install it.
"""

from __future__ import annotations

import json
import shutil
import subprocess
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from trcomp.contract.errors import LocalModeError

__all__ = [
    "NOT_FOUND",
    "PROBE_TIMEOUT_S",
    "TIMED_OUT",
    "EngineStatus",
    "compose_command",
    "compose_version",
    "engine_status",
    "image_id",
    "image_present",
    "kill_labelled",
    "labelled_containers",
    "login",
    "login_command",
    "push",
    "push_command",
    "remove_labelled",
    "require_docker",
    "run_docker",
    "runtimes",
    "stop_labelled",
    "tag",
    "tag_command",
]

PROBE_TIMEOUT_S = 20.0
"""How long a quick question (info, inspect, ps) may take: a hung engine must not hang us."""
NOT_FOUND = 127
"""Exit code :func:`run_docker` answers when the ``docker`` CLI is not on PATH (as a shell does)."""
TIMED_OUT = 124
"""Exit code :func:`run_docker` answers when the command ran past its timeout (as timeout(1))."""


def _run(
    cmd: list[str],
    *,
    timeout: float | None = PROBE_TIMEOUT_S,
    capture: bool = True,
    input: str | None = None,
    env: Mapping[str, str] | None = None,
) -> subprocess.CompletedProcess[str]:
    try:
        return subprocess.run(
            cmd,
            capture_output=capture,
            text=True,
            timeout=timeout,
            input=input,
            env=None if env is None else dict(env),
            check=False,
        )
    except FileNotFoundError:
        return subprocess.CompletedProcess(cmd, NOT_FOUND, "", f"{cmd[0]}: not found (not on PATH)")
    except subprocess.TimeoutExpired:
        return subprocess.CompletedProcess(cmd, TIMED_OUT, "", f"no answer within {timeout:.0f} s")


def run_docker(
    args: Sequence[str],
    *,
    timeout: float | None = PROBE_TIMEOUT_S,
    capture: bool = True,
    input: str | None = None,
    env: Mapping[str, str] | None = None,
    check: bool = False,
) -> subprocess.CompletedProcess[str]:
    """Run ``docker ARGS``; its output is captured unless ``capture`` is False (then it streams).

    ``timeout`` None waits for ever (builds, pushes). A missing CLI answers
    :data:`NOT_FOUND`, a timeout :data:`TIMED_OUT`, both with a message in
    ``stderr``. ``check`` raises :class:`subprocess.CalledProcessError` on a
    non-zero exit (the ``trcomp`` command reports it as "`docker X` failed").
    """
    cmd = ["docker", *args]
    done = _run(cmd, timeout=timeout, capture=capture, input=input, env=env)
    if check and done.returncode != 0:
        raise subprocess.CalledProcessError(done.returncode, cmd, done.stdout, done.stderr)
    return done


def require_docker(why: str) -> str:
    """The path of the ``docker`` CLI, or :class:`LocalModeError` ``Docker is not installed ...``.

    ``why`` finishes the message: what needed Docker and what to do instead.
    """
    found = shutil.which("docker")
    if found is None:
        raise LocalModeError(f"Docker is not installed (no `docker` on PATH): {why}")
    return found


# -- the engine ----------------------------------------------------------------------


@dataclass(frozen=True)
class EngineStatus:
    """What ``docker info`` said: the server version, or the lines of its complaint."""

    version: str
    """The engine's version; empty when it did not answer."""
    returncode: int
    problem: tuple[str, ...] = ()
    """docker's error output, line by line (empty when the engine answered)."""

    @property
    def ok(self) -> bool:
        """The engine answered with its version."""
        return self.returncode == 0 and bool(self.version)

    @property
    def permission_denied(self) -> bool:
        """The engine is there but refused this user (the docker socket's permissions)."""
        return any("permission denied" in line.lower() for line in self.problem)


def engine_status() -> EngineStatus:
    """Ask the engine for its version (``docker info``)."""
    info = run_docker(["info", "--format", "{{.ServerVersion}}"])
    version = info.stdout.strip() if info.returncode == 0 else ""
    problem = () if version else tuple((info.stderr or info.stdout).strip().splitlines())
    return EngineStatus(version, info.returncode, problem)


def runtimes() -> dict[str, Any]:
    """The container runtimes the engine knows (``nvidia`` among them with the NVIDIA toolkit)."""
    done = run_docker(["info", "--format", "{{json .Runtimes}}"])
    if done.returncode != 0:
        return {}
    try:
        found = json.loads(done.stdout or "{}")
    except json.JSONDecodeError:
        return {}
    return found if isinstance(found, dict) else {}


def compose_command() -> list[str] | None:
    """The compose CLI SageMaker local mode will run (the SDK's own order), or None.

    The SDK takes ``docker compose`` when ``docker compose version`` prints a
    v2 version, else ``docker-compose`` when it is on PATH.
    """
    probe = run_docker(["compose", "version"])
    if probe.returncode == 0 and "v2" in probe.stdout:
        return ["docker", "compose"]
    if shutil.which("docker-compose"):
        return ["docker-compose"]
    return None


def compose_version(command: Sequence[str]) -> str:
    """The short version ``COMPOSE version --short`` prints (empty if it prints none)."""
    done = _run([*command, "version", "--short"])
    return done.stdout.strip() if done.returncode == 0 else ""


# -- images --------------------------------------------------------------------------


def image_id(image: str) -> str | None:
    """The id (``sha256:...``) of ``image`` in the local engine, or None when it is not there."""
    found = run_docker(["image", "inspect", "--format", "{{.Id}}", image])
    return found.stdout.strip() if found.returncode == 0 else None


def image_present(image: str) -> bool:
    """Whether the local engine has ``image`` (no pull is tried)."""
    return image_id(image) is not None


def login_command(registry: str) -> list[str]:
    """``docker login`` for ``registry``, the password read on stdin (never on a command line)."""
    return ["docker", "login", "--username", "AWS", "--password-stdin", registry]


def tag_command(source: str, target: str) -> list[str]:
    """``docker tag SOURCE TARGET``."""
    return ["docker", "tag", source, target]


def push_command(image: str) -> list[str]:
    """``docker push IMAGE``."""
    return ["docker", "push", image]


def login(registry: str, password: str) -> None:
    """Log in to ``registry`` as ``AWS``; raises ``CalledProcessError`` if docker refuses."""
    run_docker(login_command(registry)[1:], timeout=None, capture=False, input=password, check=True)


def tag(source: str, target: str) -> None:
    """Tag a local image; raises ``CalledProcessError`` if docker refuses."""
    run_docker(tag_command(source, target)[1:], timeout=None, capture=False, check=True)


def push(image: str) -> None:
    """Push an image, docker's progress streaming to the terminal; raises on failure."""
    run_docker(push_command(image)[1:], timeout=None, capture=False, check=True)


# -- containers by label -------------------------------------------------------------


def labelled_containers(label: str) -> list[str]:
    """The ids of every container carrying ``label`` (``key=value``), running or not."""
    found = run_docker(["ps", "-aq", "--filter", f"label={label}"])
    return found.stdout.split() if found.returncode == 0 else []


def stop_labelled(label: str, grace: float) -> list[str]:
    """``docker stop`` (SIGTERM, SIGKILL after ``grace`` s) every container with ``label``."""
    ids = labelled_containers(label)
    if ids:
        run_docker(["stop", "--time", str(int(grace)), *ids], timeout=grace + 60)
    return ids


def kill_labelled(label: str) -> None:
    """SIGKILL every container with ``label`` now."""
    ids = labelled_containers(label)
    if ids:
        run_docker(["kill", *ids], timeout=60)


def remove_labelled(label: str, grace: float) -> None:
    """Stop, then remove every container with ``label``."""
    ids = stop_labelled(label, grace)
    if ids:
        run_docker(["rm", "--force", *ids], timeout=60)
