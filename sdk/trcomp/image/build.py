"""Build the trcomp training image: the one build path of ``trcomp image build`` and ``make image``.

The build context is staged in a temporary directory instead of sending the
checkout (with its virtualenv) to the Docker daemon. It holds:

- ``Dockerfile`` and ``entrypoint.sh`` from ``container/``;
- ``requirements.txt``: what the container needs from the trcomp wheel's own
  metadata (its base requirements and the ``container`` extra, minus the
  SageMaker SDK, which only the client side uses). The Dockerfile installs it
  in its heavy layer, which Docker reuses until the requirements change;
- ``requirements-hf.txt``: the ``hf`` extra (transformers, accelerate), installed
  in its own layer after the heavy one, so changing its pins does not reinstall
  torch;
- ``wheels/``: the trcomp wheel, built from the checkout, installed last so
  that a code change rebuilds only the light layers;
- ``extra-ca.pem``: an extra CA bundle to trust (empty unless given), for
  builds behind a TLS-inspecting proxy.

:func:`build_image` computes the ``docker build`` command and
:func:`build_commands` every command of a build, offline base included (both
pure, for ``--dry-run``); :func:`stage_context` prepares the context;
:func:`run_build` does it all. ``make image`` runs ``trcomp image build``.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
import time
import zipfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from trcomp import docker_cli
from trcomp.contract.errors import LocalModeError
from trcomp.image.uris import LOCAL_IMAGE, ImageVersions, default_image

__all__ = [
    "DEFAULT_BASE_IMAGE",
    "OFFLINE_BASE_IMAGE",
    "BuildResult",
    "build_commands",
    "build_image",
    "container_requirements",
    "extra_requirements",
    "run_build",
    "source_root",
    "stage_context",
]

DEFAULT_BASE_IMAGE = default_image().base_image
"""The public CUDA PyTorch image the default version's image builds on (each version of
:data:`trcomp.image.uris.IMAGES` has its own: ``ImageVersions.base_image``)."""

OFFLINE_BASE_IMAGE = "trcomp-base:bookworm"
"""The Debian base built without a registry by ``container/build_base.sh``."""

# The container never submits jobs: it does not need the SageMaker SDK and its
# dependency tree (pandas, fastapi, ...).
_CLIENT_ONLY = frozenset({"sagemaker"})
_CONTEXT_FILES = ("Dockerfile", "entrypoint.sh")
# The packages of each engine in the `container` extra: an image whose torch version
# has no such engine (torch 2.14: inductor only) leaves them out.
_ENGINE_PACKAGES = {"torch_xla": ("torch-xla",), "jax": ("jax", "jaxlib", "torchax")}


def build_image(
    base_image: str | None,
    tag: str = LOCAL_IMAGE,
    context_dir: str | os.PathLike[str] = ".",
    *,
    no_cache: bool = False,
    network: str = "host",
) -> list[str]:
    """The ``docker build`` command for the training image (pure: runs nothing).

    ``base_image`` None keeps the Dockerfile's default (:data:`DEFAULT_BASE_IMAGE`).
    ``network`` defaults to ``host``: pip inside the build reaches the package
    index the way the host does, with no Docker bridge or NAT needed.
    """
    context = Path(context_dir)
    # --force-rm: a failed step's container is removed too, not left behind.
    cmd = [
        "docker",
        "build",
        "--network",
        network,
        "--force-rm",
        "-t",
        tag,
        "-f",
        str(context / "Dockerfile"),
    ]
    if base_image:
        cmd += ["--build-arg", f"BASE_IMAGE={base_image}"]
    if no_cache:
        cmd.append("--no-cache")
    cmd.append(str(context))
    return cmd


def _base_script(root: Path) -> Path:
    return root / "container" / "build_base.sh"


def build_commands(
    root: Path,
    base_image: str | None,
    *,
    offline: bool = False,
    tag: str = LOCAL_IMAGE,
    context: str | os.PathLike[str] = "<staged context>",
    no_cache: bool = False,
    versions: ImageVersions | None = None,
) -> list[list[str]]:
    """Every command :func:`run_build` runs, in order (pure: for ``--dry-run``).

    ``offline`` first builds the Debian base (``container/build_base.sh``, which
    skips an existing tag) and builds ``FROM`` it. ``context`` is the directory
    :func:`stage_context` fills.
    """
    commands = []
    if offline:
        base_image = base_image or OFFLINE_BASE_IMAGE
        commands.append(["bash", str(_base_script(root)), base_image])
    base_image = base_image or _version_base(versions)
    commands.append(build_image(base_image, tag, context, no_cache=no_cache))
    return commands


def _version_base(versions: ImageVersions | None) -> str | None:
    """The public base image of a version other than the default (the Dockerfile's
    own default is the default version's)."""
    if versions is None or versions == default_image():
        return None
    return versions.base_image


def source_root(start: str | os.PathLike[str] | None = None) -> Path:
    """The trcomp checkout holding ``container/Dockerfile`` (this file's, by default)."""
    root = Path(start) if start else Path(__file__).resolve().parents[3]
    if not (root / "container" / "Dockerfile").is_file():
        raise LocalModeError(
            f"no container/Dockerfile under {root}: building the image needs a checkout of "
            "the trcomp repository. Run `trcomp image build --source PATH` from one."
        )
    return root


def _wheel_requirements(wheel: str | os.PathLike[str]) -> list[Any]:
    from packaging.requirements import Requirement

    with zipfile.ZipFile(wheel) as zf:
        name = next(n for n in zf.namelist() if n.endswith(".dist-info/METADATA"))
        metadata = zf.read(name).decode()
    return [
        Requirement(line.split(":", 1)[1].strip())
        for line in metadata.splitlines()
        if line.startswith("Requires-Dist:")
    ]


def container_requirements(
    wheel: str | os.PathLike[str],
    *,
    jax_cuda: bool = False,
    versions: ImageVersions | None = None,
) -> list[str]:
    """The requirements the image installs for a trcomp wheel, read from its metadata.

    Base requirements and the ``container`` extra, without the client-only SDK;
    with ``jax_cuda`` also the ``jax-cuda`` extra (JAX's CUDA plugin, GPU images).
    ``versions`` (default: the default image's) sets the torch pin and leaves out
    the packages of the engines that version has not.
    """
    versions = versions or default_image()
    left_out = {
        package
        for engine, packages in _ENGINE_PACKAGES.items()
        if engine not in versions.engines
        for package in packages
    }
    extras = ("container", "jax-cuda") if jax_cuda and "jax" in versions.engines else ("container",)
    requirements: list[str] = []
    for req in _wheel_requirements(wheel):
        name = req.name.lower()
        if name in _CLIENT_ONLY or name in left_out:
            continue
        if name == "torch":
            req.specifier = type(req.specifier)(f"=={versions.torch}")
        if req.marker is not None and not any(
            req.marker.evaluate({"extra": extra}) for extra in extras
        ):
            continue
        req.marker = None
        requirements.append(str(req))
    return requirements


def extra_requirements(wheel: str | os.PathLike[str], extra: str) -> list[str]:
    """The requirements of one extra of a trcomp wheel only (``hf``: transformers, accelerate)."""
    requirements: list[str] = []
    for req in _wheel_requirements(wheel):
        if req.marker is None or not req.marker.evaluate({"extra": extra}):
            continue
        if req.marker.evaluate({"extra": ""}):  # a base requirement with another marker
            continue
        req.marker = None
        requirements.append(str(req))
    return requirements


def _build_wheel(root: Path, out: Path) -> Path:
    """Build the trcomp wheel from a clean copy, so the checkout gets no build/ or egg-info."""
    with tempfile.TemporaryDirectory(prefix="trcomp-src-") as tmp:
        src = Path(tmp)
        shutil.copy2(root / "pyproject.toml", src)
        readme = root / "README.md"
        if readme.is_file():
            shutil.copy2(readme, src)
        else:  # setuptools refuses a missing readme
            (src / "README.md").write_text("trcomp\n")
        ignore = shutil.ignore_patterns("__pycache__", "*.pyc", "*.egg-info")
        shutil.copytree(root / "sdk", src / "sdk", ignore=ignore)
        shutil.copytree(
            root / "container" / "trcomp_container",
            src / "container" / "trcomp_container",
            ignore=ignore,
        )
        cmd = [
            sys.executable,
            "-m",
            "pip",
            "wheel",
            "--quiet",
            "--no-deps",
            "-w",
            str(out),
            str(src),
        ]
        proc = subprocess.run(cmd, capture_output=True, text=True, check=False)
        if proc.returncode != 0:
            raise LocalModeError(
                f"building the trcomp wheel failed (exit {proc.returncode}):\n"
                f"{proc.stderr.strip()[-2000:]}\nFix the packaging error above and build again."
            )
    wheels = sorted(out.glob("trcomp-*.whl"))
    if not wheels:
        raise LocalModeError(f"pip wheel wrote no trcomp wheel to {out}; build again with -v.")
    return wheels[-1]


def stage_context(
    dest: str | os.PathLike[str],
    *,
    root: str | os.PathLike[str] | None = None,
    extra_ca_bundle: str | os.PathLike[str] | None = None,
    jax_cuda: bool = False,
    versions: ImageVersions | None = None,
) -> Path:
    """Write the build context into ``dest`` (see the module docstring) and return it.

    ``jax_cuda`` adds JAX's CUDA plugin to the requirements (GPU images);
    ``versions`` is the image's torch version and engines (default: the default image).
    """
    src = source_root(root)
    context = Path(dest)
    (context / "wheels").mkdir(parents=True, exist_ok=True)
    for name in _CONTEXT_FILES:
        shutil.copy2(src / "container" / name, context / name)
    wheel = _build_wheel(src, context / "wheels")
    (context / "requirements.txt").write_text(
        "\n".join(container_requirements(wheel, jax_cuda=jax_cuda, versions=versions)) + "\n"
    )
    hf = extra_requirements(wheel, "hf")
    (context / "requirements-hf.txt").write_text("\n".join(hf) + "\n")
    ca = b""
    if extra_ca_bundle:
        ca_path = Path(extra_ca_bundle)
        if not ca_path.is_file():
            raise LocalModeError(
                f"extra CA bundle {ca_path} does not exist; pass a PEM file "
                "(e.g. /etc/ssl/certs/ca-certificates.crt)."
            )
        ca = ca_path.read_bytes()
    (context / "extra-ca.pem").write_bytes(ca)
    return context


@dataclass(frozen=True)
class BuildResult:
    """What :func:`run_build` did: the image tag, the command and its wall time."""

    tag: str
    command: list[str]
    seconds: float


def run_build(
    base_image: str | None = None,
    tag: str = LOCAL_IMAGE,
    *,
    offline: bool = False,
    extra_ca_bundle: str | os.PathLike[str] | None = None,
    root: str | os.PathLike[str] | None = None,
    no_cache: bool = False,
    versions: ImageVersions | None = None,
) -> BuildResult:
    """Build the image: the offline base if asked, the context, then ``docker build``.

    Docker's output streams to the terminal. ``offline`` builds on
    :data:`OFFLINE_BASE_IMAGE` (or ``base_image``), made first by
    ``container/build_base.sh``. ``versions`` is the torch version to build
    (:data:`trcomp.image.uris.IMAGES`; default: the default one). Raises
    :class:`~trcomp.contract.errors.LocalModeError` when Docker is missing or a step fails.
    """
    docker_cli.require_docker(
        "building the image needs Docker. "
        "Run `make docker-engine` (Debian/Ubuntu) or install Docker Engine."
    )
    src = source_root(root)
    if offline:
        base_image = base_image or OFFLINE_BASE_IMAGE
        script = build_commands(src, base_image, offline=True)[0]
        done = subprocess.run(script, check=False)
        if done.returncode != 0:
            raise LocalModeError(
                f"`{' '.join(script[1:])}` could not build the offline base image "
                f"(exit {done.returncode}); its output is above."
            )
    base_image = base_image or _version_base(versions)
    base = base_image or DEFAULT_BASE_IMAGE
    if base == OFFLINE_BASE_IMAGE and not docker_cli.image_present(base):
        raise LocalModeError(
            f"the offline base image {base} is not built: run `make base-image` "
            "(container/build_base.sh, needs root and debootstrap) first."
        )
    start = time.monotonic()
    with tempfile.TemporaryDirectory(prefix="trcomp-build-") as tmp:
        ctx = Path(tmp)
        # The offline Debian base is a CPU image: JAX's CUDA plugin only goes into GPU images.
        stage_context(
            ctx,
            root=src,
            extra_ca_bundle=extra_ca_bundle,
            jax_cuda=base != OFFLINE_BASE_IMAGE,
            versions=versions,
        )
        cmd = build_image(base_image, tag, ctx, no_cache=no_cache)
        # The classic builder: BuildKit needs the buildx plugin, which Debian's
        # docker.io does not ship; the Dockerfile needs nothing BuildKit-only.
        env = {**os.environ, "DOCKER_BUILDKIT": os.environ.get("DOCKER_BUILDKIT", "0")}
        proc = docker_cli.run_docker(cmd[1:], timeout=None, capture=False, env=env)
    if proc.returncode != 0:
        if not docker_cli.image_present(base):
            raise LocalModeError(
                f"`docker build` of {tag} could not get the base image {base} from its "
                "registry (output above). Without a registry, build on the offline base: "
                f"`make image OFFLINE=1` or `trcomp image build --base-image {OFFLINE_BASE_IMAGE}`."
            )
        raise LocalModeError(
            f"`docker build` of {tag} failed (exit {proc.returncode}); its output is above. "
            "Behind a TLS-inspecting proxy pass the proxy's CA bundle "
            "(`trcomp image build --extra-ca-bundle FILE`, or EXTRA_CA_BUNDLE=FILE make image)."
        )
    return BuildResult(tag=tag, command=cmd, seconds=time.monotonic() - start)
