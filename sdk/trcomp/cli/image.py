"""``trcomp image uri|build|push``: parse the arguments and call :mod:`trcomp.image`.

``--dry-run`` prints the commands a step would run (:func:`trcomp.image.build.build_commands`,
:func:`trcomp.image.push.push_commands`); the ECR password never appears in them.
"""

from __future__ import annotations

import argparse
import shlex
from collections.abc import Sequence

from trcomp.image.uris import DEFAULT_FRAMEWORK_VERSION, IMAGES, image_for

__all__ = ["register", "shell_line"]


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
        description="Build the training image of one torch version (--framework-version) "
        "from a trcomp checkout with `docker build --network host`. The image gets the tag "
        "local mode runs for that version: trcomp-training:latest for the default version, "
        "trcomp-training:torch<version> for the others (TRCOMP_LOCAL_IMAGE overrides both).",
    )
    _add_version(build)
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
    build.add_argument(
        "--tag", default=None, help="local tag (default: the version's, as local mode runs it)"
    )
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
        "--local-image",
        default=None,
        help="local image to push (default: the version's local tag, as `image build` makes it)",
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
    _add_version(parser)


def _add_version(parser: argparse.ArgumentParser) -> None:
    versions = ", ".join(image.short for image in IMAGES)
    parser.add_argument(
        "--framework-version",
        default=DEFAULT_FRAMEWORK_VERSION,
        type=_torch_version,
        help=f"PyTorch version of the image: {versions} (default: {DEFAULT_FRAMEWORK_VERSION})",
    )


def _torch_version(value: str) -> str:
    """The full torch version of one of trcomp's images (``2.14`` becomes ``2.14.1``)."""
    image = image_for(value)
    if image is None:
        built = ", ".join(i.torch for i in IMAGES)
        raise argparse.ArgumentTypeError(f"trcomp builds no image for torch {value} ({built})")
    return image.torch


def shell_line(command: Sequence[str]) -> str:
    """A command as a shell line, for printing."""
    return " ".join(shlex.quote(part) for part in command)


def _uri(args: argparse.Namespace) -> int:
    from trcomp.image.push import aws_target
    from trcomp.image.uris import remote_image_uri

    _, region, account = aws_target(args.region, args.account)
    print(remote_image_uri(region, account, args.framework_version, args.device))
    return 0


def _build(args: argparse.Namespace) -> int:
    from trcomp.image.build import build_commands, run_build, source_root
    from trcomp.image.uris import local_image_uri

    tag = args.tag or local_image_uri(args.framework_version)
    versions = image_for(args.framework_version)
    if args.dry_run:
        root = source_root(args.source)
        commands = build_commands(
            root,
            args.base_image,
            offline=args.offline,
            tag=tag,
            no_cache=args.no_cache,
            versions=versions,
        )
        print("# <staged context>: a temporary directory with the Dockerfile, entrypoint.sh,")
        print("# requirements.txt, requirements-hf.txt and a trcomp wheel built from " + str(root))
        for command in commands:
            print(shell_line(command))
        return 0
    result = run_build(
        args.base_image,
        tag,
        offline=args.offline,
        extra_ca_bundle=args.extra_ca_bundle,
        root=args.source,
        no_cache=args.no_cache,
        versions=versions,
    )
    print(f"built {result.tag} in {result.seconds:.1f} s")
    return 0


def _push(args: argparse.Namespace) -> int:
    from trcomp.image.push import aws_target, ecr_login, push_commands, push_image
    from trcomp.image.uris import ecr_image_uri, local_image_uri

    session, region, account = aws_target(args.region, args.account)
    # Where the image goes is the registry itself, whatever TRCOMP_IMAGE_URI says.
    remote = ecr_image_uri(region, account, args.framework_version, args.device)
    local = args.local_image or local_image_uri(args.framework_version)
    login = ecr_login(session, region, account, create_repository=not args.dry_run)
    if args.dry_run:
        print(f"# ECR login for {login.registry} obtained; the password goes on stdin")
        for command in push_commands(login.registry, local, remote):
            print(shell_line(command))
        return 0
    push_image(login, local, remote)
    print(remote)
    return 0
