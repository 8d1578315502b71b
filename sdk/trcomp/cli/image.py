"""``trcomp image uri|build|push``: name, build and publish the training image.

The commands a step runs are computed by pure functions (:func:`build_commands`,
:func:`push_commands`) and printed by ``--dry-run``; the ECR password goes to
``docker login`` on stdin, never on a command line.
"""

from __future__ import annotations

import argparse
import base64
import subprocess
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from trcomp.images import DEFAULT_FRAMEWORK_VERSION, REPOSITORY, ecr_image_uri, local_image_uri

__all__ = [
    "EcrLogin",
    "build_commands",
    "ecr_login",
    "push_commands",
    "register",
    "remote_uri",
    "shell_line",
]


def register(commands: argparse._SubParsersAction) -> argparse.ArgumentParser:  # type: ignore[type-arg]
    """Add ``image`` and its three subcommands to the ``trcomp`` parser."""
    parser = commands.add_parser(
        "image",
        help="name, build or push the trcomp training image",
        description="Name, build or push the trcomp training image.",
    )
    sub = parser.add_subparsers(dest="image_command", metavar="SUBCOMMAND", required=True)

    uri = sub.add_parser(
        "uri",
        help="print the image URI remote jobs use",
        description="Print the ECR image URI a remote job uses by default "
        "(<account>.dkr.ecr.<region>.amazonaws.com/trcomp-training:<tag>). "
        "TRCOMP_IMAGE_URI, when set, overrides it for every job and is printed instead.",
    )
    _add_target(uri)
    uri.set_defaults(func=_uri)

    build = sub.add_parser(
        "build",
        help="build the training image locally (what `make image` does)",
        description="Build the training image from a trcomp checkout with `docker build "
        "--network host`. The image is tagged trcomp-training:latest (TRCOMP_LOCAL_IMAGE), "
        "the tag local mode runs.",
    )
    build.add_argument(
        "--base-image",
        help="image to build FROM (default: the Dockerfile's, a public CUDA PyTorch image)",
    )
    build.add_argument(
        "--offline",
        action="store_true",
        help="first build a Debian base image without any registry "
        "(container/build_base.sh) and build FROM it",
    )
    build.add_argument("--tag", default=None, help="local tag (default: trcomp-training:latest)")
    build.add_argument("--extra-ca-bundle", help="PEM bundle the image must trust (TLS proxies)")
    build.add_argument("--source", help="trcomp checkout to build from (default: this one)")
    build.add_argument("--no-cache", action="store_true", help="pass --no-cache to docker build")
    build.add_argument("--dry-run", action="store_true", help="print the commands, run nothing")
    build.set_defaults(func=_build)

    push = sub.add_parser(
        "push",
        help="push the local image to your ECR registry",
        description="Log in to ECR (boto3 GetAuthorizationToken; the password goes to "
        "`docker login --password-stdin`), create the trcomp-training repository if it is "
        "missing, then `docker tag` and `docker push` the local image to the URI that "
        "`trcomp image uri` prints.",
    )
    _add_target(push)
    push.add_argument(
        "--local-image", default=None, help="local image to push (default: trcomp-training:latest)"
    )
    push.add_argument(
        "--dry-run",
        action="store_true",
        help="log in to ECR through boto3, then print the docker commands instead of running them",
    )
    push.set_defaults(func=_push)
    return parser


def _add_target(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--region", help="AWS region (default: the configured one)")
    parser.add_argument("--account", help="AWS account id (default: the caller's, from STS)")
    parser.add_argument(
        "--device", choices=("gpu", "cpu"), default="gpu", help="image flavour (default: gpu)"
    )
    parser.add_argument(
        "--framework-version",
        default=DEFAULT_FRAMEWORK_VERSION,
        help=f"PyTorch version in the image (default: {DEFAULT_FRAMEWORK_VERSION})",
    )


# -- uri -----------------------------------------------------------------------------


def _target(args: argparse.Namespace) -> tuple[Any, str, str]:
    """(boto3 session, region, account) for --region/--account, asking STS when needed."""
    import boto3

    from trcomp.errors import TrcompError

    session = boto3.Session(region_name=args.region) if args.region else boto3.Session()
    region = session.region_name
    if not region:
        raise TrcompError("no AWS region: pass --region or set AWS_REGION")
    account = args.account
    if not account:
        from trcomp.remote import sts_client

        account = str(sts_client(session).get_caller_identity()["Account"])
    return session, region, account


def remote_uri(region: str, account: str, framework_version: str, device: str) -> str:
    """The ECR URI for our image (same as jobs use; TRCOMP_IMAGE_URI wins)."""
    from trcomp.images import remote_image_uri

    return remote_image_uri(region, account, framework_version, device)  # type: ignore[arg-type]


def _uri(args: argparse.Namespace) -> int:
    _, region, account = _target(args)
    print(remote_uri(region, account, args.framework_version, args.device))
    return 0


# -- build ---------------------------------------------------------------------------


def build_commands(
    root: Path,
    base_image: str | None,
    *,
    offline: bool = False,
    tag: str | None = None,
    context: str = "<staged context>",
    no_cache: bool = False,
) -> list[list[str]]:
    """The commands ``trcomp image build`` runs, in order (pure).

    ``context`` is the directory :func:`trcomp.image_build.stage_context` fills.
    """
    from trcomp.image_build import OFFLINE_BASE_IMAGE, build_image

    commands = []
    if offline:
        base_image = base_image or OFFLINE_BASE_IMAGE
        commands.append(["bash", str(root / "container" / "build_base.sh"), base_image])
    commands.append(build_image(base_image, tag or local_image_uri(), context, no_cache=no_cache))
    return commands


def shell_line(command: Sequence[str]) -> str:
    """A command as a shell line, for printing."""
    import shlex

    return " ".join(shlex.quote(part) for part in command)


def _build(args: argparse.Namespace) -> int:
    from trcomp.image_build import run_build, source_root

    root = source_root(args.source)
    commands = build_commands(
        root, args.base_image, offline=args.offline, tag=args.tag, no_cache=args.no_cache
    )
    if args.dry_run:
        print("# <staged context>: a temporary directory with the Dockerfile, entrypoint.sh,")
        print("# requirements.txt, requirements-hf.txt and a trcomp wheel built from " + str(root))
        for command in commands:
            print(shell_line(command))
        return 0
    if args.offline:
        subprocess.run(commands[0], check=True)
    base = args.base_image or (commands[0][-1] if args.offline else None)
    result = run_build(
        base,
        args.tag or local_image_uri(),
        extra_ca_bundle=args.extra_ca_bundle,
        root=root,
        no_cache=args.no_cache,
    )
    print(f"built {result.tag} in {result.seconds:.1f} s")
    return 0


# -- push ----------------------------------------------------------------------------


class EcrLogin:
    """An ECR registry and its short-lived password (kept out of ``repr`` and argv)."""

    def __init__(self, registry: str, password: str) -> None:
        self.registry = registry
        self._password = password

    @property
    def password(self) -> str:
        """The password ``docker login`` reads on stdin."""
        return self._password

    def __repr__(self) -> str:
        return f"EcrLogin(registry={self.registry!r}, password=<hidden>)"


def ecr_login(session: Any, region: str, account: str, create_repository: bool = True) -> EcrLogin:
    """Get an ECR password for ``account`` (and create our repository if it is missing)."""
    ecr = session.client("ecr", region_name=region)
    data = ecr.get_authorization_token(registryIds=[account])["authorizationData"][0]
    user, _, password = base64.b64decode(data["authorizationToken"]).decode().partition(":")
    if user != "AWS" or not password:
        from trcomp.errors import TrcompError

        raise TrcompError("ECR returned an authorization token that is not AWS:<password>")
    if create_repository:
        try:
            ecr.describe_repositories(registryId=account, repositoryNames=[REPOSITORY])
        except ecr.exceptions.RepositoryNotFoundException:
            ecr.create_repository(registryId=account, repositoryName=REPOSITORY)
            print(f"created ECR repository {REPOSITORY}", file=sys.stderr)
    registry = data["proxyEndpoint"].removeprefix("https://").removeprefix("http://")
    return EcrLogin(registry, password)


def push_commands(registry: str, local_image: str, remote: str) -> list[list[str]]:
    """``docker login`` (password on stdin), ``docker tag``, ``docker push`` (pure)."""
    return [
        ["docker", "login", "--username", "AWS", "--password-stdin", registry],
        ["docker", "tag", local_image, remote],
        ["docker", "push", remote],
    ]


def _push(args: argparse.Namespace) -> int:
    session, region, account = _target(args)
    # Where the image goes is the registry itself, whatever TRCOMP_IMAGE_URI says.
    remote = ecr_image_uri(region, account, args.framework_version, args.device)
    login = ecr_login(session, region, account, create_repository=not args.dry_run)
    commands = push_commands(login.registry, args.local_image or local_image_uri(), remote)
    if args.dry_run:
        print(f"# ECR login for {login.registry} obtained; the password goes on stdin")
        for command in commands:
            print(shell_line(command))
        return 0
    subprocess.run(commands[0], input=login.password, text=True, check=True)
    for command in commands[1:]:
        subprocess.run(command, check=True)
    print(remote)
    return 0
