"""``trcomp cache withdraw``: withdraw every shared-cache entry and Redis value signed before
a moment, without a new key (:mod:`trcomp.contract.withdrawal`; docs/remote.md,
*Withdrawing entries*).

``--secret`` rewrites the key's Secrets Manager secret as ``{"key": ..., "not_before":
...}``, keeping the key; ``--env`` prints the variable a local-mode job sets beside its
key. The key is never printed.
"""

from __future__ import annotations

import argparse
import time

from trcomp.contract.env import KEY_ENV, KEY_SECRET_ENV, NOT_BEFORE_ENV
from trcomp.contract.errors import SharedCacheError
from trcomp.contract.shared_cache import aws_call_limits
from trcomp.contract.withdrawal import KeySecret, format_moment, parse_moment

__all__ = ["register", "withdraw"]

_FUTURE_SLACK_S = 60
"""How far ahead of this machine's clock ``--before`` may be (clocks differ a little)."""

_DESCRIPTION = f"""\
Withdraw everything the team's key signed before a moment, keeping the key:
every job that reads with the key then skips the shared-cache entries and
Redis values written earlier (entries_withdrawn, redis_values_withdrawn in its
summary) and compiles them again. The moment travels with the key, never in
the store.

  --secret   the secret {KEY_SECRET_ENV} names: its value
             becomes {{"key": <the key, kept>, "not_before": <moment>}}
  --env      print {NOT_BEFORE_ENV}=<moment>, to set beside
             {KEY_ENV} in a local-mode estimator's environment=

Jobs already running keep what they read: stop them."""


def register(commands: argparse._SubParsersAction) -> argparse.ArgumentParser:  # type: ignore[type-arg]
    """Add ``cache withdraw`` to the ``trcomp`` parser."""
    parser = commands.add_parser(
        "cache",
        help="manage the team's shared compile cache (withdraw entries)",
        description="Manage the team's shared compile cache.",
    )
    sub = parser.add_subparsers(dest="cache_command", metavar="SUBCOMMAND", required=True)
    withdraw_ = sub.add_parser(
        "withdraw",
        help="withdraw every entry and Redis value signed before a moment",
        description=_DESCRIPTION,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    where = withdraw_.add_mutually_exclusive_group(required=True)
    where.add_argument("--secret", help="the key's Secrets Manager secret (name or ARN)")
    where.add_argument(
        "--env", action="store_true", help=f"print {NOT_BEFORE_ENV} for local modes instead"
    )
    withdraw_.add_argument(
        "--before",
        help="ISO-8601 time with its zone, e.g. 2026-12-04T15:00:00Z (default: now)",
    )
    withdraw_.add_argument("--region", help="the secret's region (default: boto3's)")
    withdraw_.set_defaults(func=_run)
    return withdraw_


def _run(args: argparse.Namespace) -> int:
    moment = _moment(args.before)
    if args.env:
        print(f"{NOT_BEFORE_ENV}={format_moment(moment)}")
        print(
            f"# set it in the estimator's environment= beside {KEY_ENV}: entries and Redis "
            "values signed before it are skipped",
        )
        return 0
    print(withdraw(args.secret, moment, region=args.region))
    return 0


def _moment(text: str | None) -> int:
    if text is None:
        return parse_moment(format_moment(time.time()), what="now")
    moment = parse_moment(text, what="--before")
    if moment > time.time() + _FUTURE_SLACK_S:
        raise SharedCacheError(
            f"--before {format_moment(moment)} is in the future: every entry the team writes "
            "until then would be withdrawn too. Give a past moment, or leave --before out (now)."
        )
    return moment


def withdraw(secret: str, moment: int, *, region: str | None = None) -> str:
    """Set the ``not_before`` of the key's secret to ``moment`` (kept when it is already
    later), keeping the key; what was done, in one line."""
    import boto3
    from botocore.config import Config

    client = boto3.session.Session(region_name=region).client(
        "secretsmanager", config=Config(**aws_call_limits(30))
    )
    text = client.get_secret_value(SecretId=secret).get("SecretString")
    if text is None:
        raise SharedCacheError(
            f"the secret {secret} holds binary data, not the key as text: store the key as a "
            "secret string (the job reads either, trcomp cache withdraw needs text)"
        )
    current = KeySecret.parse(text, what=f"the secret {secret}")
    if current.not_before is not None and current.not_before >= moment:
        return (
            f"{secret} already withdraws everything signed before "
            f"{format_moment(current.not_before)}, which is not before {format_moment(moment)}: "
            "unchanged"
        )
    client.put_secret_value(SecretId=secret, SecretString=KeySecret(current.key, moment).to_text())
    before = "" if current.not_before is None else f" (was {format_moment(current.not_before)})"
    return (
        f"withdrew everything signed before {format_moment(moment)}{before}: {secret} now "
        "holds the same key and that not_before; jobs that start from now on skip those "
        "entries and Redis values and compile them again (running jobs are not affected)"
    )
