"""Publish the training image to the caller's ECR registry (``trcomp image push``).

ECR gives a short-lived password (boto3 ``GetAuthorizationToken``); it goes to
``docker login`` on stdin, never on a command line, and is kept out of
``repr``. :func:`push_commands` lists the docker commands (pure, for
``--dry-run``); :func:`push_image` runs them through :mod:`trcomp.docker_cli`.
"""

from __future__ import annotations

import base64
import sys
from typing import Any

from trcomp import docker_cli
from trcomp.contract.errors import TrcompError
from trcomp.image.uris import REPOSITORY

__all__ = ["EcrLogin", "aws_target", "ecr_login", "push_commands", "push_image"]


def aws_target(region: str | None = None, account: str | None = None) -> tuple[Any, str, str]:
    """``(boto3 session, region, account)``; the account is the caller's (STS) unless given."""
    import boto3

    session = boto3.Session(region_name=region) if region else boto3.Session()
    region = session.region_name
    if not region:
        raise TrcompError("no AWS region: pass --region or set AWS_REGION")
    if not account:
        from trcomp.remote import sts_client

        account = str(sts_client(session).get_caller_identity()["Account"])
    return session, region, account


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
        docker_cli.login_command(registry),
        docker_cli.tag_command(local_image, remote),
        docker_cli.push_command(remote),
    ]


def push_image(login: EcrLogin, local_image: str, remote: str) -> None:
    """Log in, tag ``local_image`` as ``remote`` and push it (what :func:`push_commands` lists).

    A refused step raises :class:`subprocess.CalledProcessError` (docker's output is above).
    """
    docker_cli.require_docker(
        "pushing the image needs the docker CLI and the local image. "
        "Run `make docker-engine` (Debian/Ubuntu) or install Docker Engine."
    )
    docker_cli.login(login.registry, login.password)
    docker_cli.tag(local_image, remote)
    docker_cli.push(remote)
