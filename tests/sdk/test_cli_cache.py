"""``trcomp cache withdraw`` against moto's Secrets Manager (server mode): the secret the
command leaves is what is asserted on, and the key in it is the one it held."""

from __future__ import annotations

import json
import time
from collections.abc import Iterator

import boto3
import pytest

from tests.helpers.aws import MotoServer, aws_environment, moto_server
from trcomp.cli import main
from trcomp.contract.withdrawal import format_moment

KEY = "team-key-cli-0123456789abcdef"
EARLY = format_moment(time.time() - 7200)
LATER = format_moment(time.time() - 3600)


@pytest.fixture(scope="module")
def moto(tmp_path_factory: pytest.TempPathFactory) -> Iterator[MotoServer]:
    with moto_server(tmp_path_factory.mktemp("moto-cache")) as server, aws_environment(server.url):
        yield server


def _secret(name: str, value: str) -> str:
    return str(boto3.client("secretsmanager").create_secret(Name=name, SecretString=value)["ARN"])


def _held(reference: str) -> str:
    return str(boto3.client("secretsmanager").get_secret_value(SecretId=reference)["SecretString"])


def test_withdraw_keeps_the_key_and_writes_the_moment_into_the_secret(moto, capsys):
    arn = _secret("team-cache-key", KEY)
    assert main(["cache", "withdraw", "--secret", arn, "--before", LATER]) == 0
    out = capsys.readouterr().out
    assert f"withdrew everything signed before {LATER}" in out and KEY not in out
    assert json.loads(_held(arn)) == {"key": KEY, "not_before": LATER}

    # An earlier moment would read withdrawn entries again: the later one is kept.
    assert main(["cache", "withdraw", "--secret", "team-cache-key", "--before", EARLY]) == 0
    assert "unchanged" in capsys.readouterr().out
    assert json.loads(_held(arn)) == {"key": KEY, "not_before": LATER}

    assert main(["cache", "withdraw", "--secret", arn]) == 0  # now
    out = capsys.readouterr().out
    held = json.loads(_held(arn))
    assert held["key"] == KEY and held["not_before"] > LATER and f"(was {LATER})" in out


def test_withdraw_refuses_a_moment_in_the_future_and_a_secret_it_cannot_read(moto, capsys):
    arn = _secret("team-cache-key-2", KEY)
    future = format_moment(time.time() + 86400)
    assert main(["cache", "withdraw", "--secret", arn, "--before", future]) == 1
    assert "is in the future" in capsys.readouterr().err
    assert main(["cache", "withdraw", "--secret", arn, "--before", "2026-12-04"]) == 1
    assert "with its zone" in capsys.readouterr().err
    assert _held(arn) == KEY  # untouched

    odd = _secret("team-cache-key-3", json.dumps({"key": KEY, "previous_keys": ["x" * 20]}))
    assert main(["cache", "withdraw", "--secret", odd]) == 1
    err = capsys.readouterr().err
    assert "'previous_keys'" in err and KEY not in err
    assert main(["cache", "withdraw", "--secret", "no-such-secret"]) == 1
    assert "ResourceNotFoundException" in capsys.readouterr().err


def test_withdraw_for_the_environment_prints_the_variable(capsys):
    assert main(["cache", "withdraw", "--env", "--before", LATER]) == 0
    assert capsys.readouterr().out.splitlines()[0] == f"TRCOMP_SHARED_CACHE_NOT_BEFORE={LATER}"
    with pytest.raises(SystemExit):
        main(["cache", "withdraw"])  # --secret or --env
