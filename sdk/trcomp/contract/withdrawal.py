"""Withdrawing what the team's key signed before a moment, without a new key.

A team that finds a bad entry (or fears one) sets a moment, ``not_before``: every job that
reads with the key then refuses every shared-cache entry and Redis value signed earlier
(the time each was written is covered by its signature, so no one without the key can
move it). The moment travels in the same trusted channel as the key, never in the store
(whoever can write the store could delete a marker there) and never in hyperparameters:

- a Secrets Manager secret (``TRCOMP_SHARED_CACHE_KEY_SECRET``) whose value is a JSON
  document ``{"key": "...", "not_before": "2026-12-04T15:00:00Z"}`` (a plain key is
  still accepted: no moment); ``trcomp cache withdraw --secret`` writes it;
- or, beside ``TRCOMP_SHARED_CACHE_KEY`` in local modes, :data:`NOT_BEFORE_ENV`.

Both sides use this module: the CLI writes the secret, the job reads it. Standard
library only: the start-up hook imports it.
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import datetime, timezone
from typing import Any

from trcomp.contract.env import KEY_ENV, KEY_SECRET_ENV, NOT_BEFORE_ENV
from trcomp.contract.errors import SharedCacheError

__all__ = [
    "NOT_BEFORE_ENV",
    "KeySecret",
    "format_moment",
    "not_before_of",
    "parse_moment",
]

_FIELDS = ("key", "not_before")


def parse_moment(text: str, *, what: str) -> int:
    """An ISO-8601 time with its zone (``2026-12-04T15:00:00Z``), as whole seconds since the
    epoch, rounded up: whatever was written before the moment is before the result too.

    ``what`` names the setting in the error (a moment without a zone is refused: which
    zone was meant cannot be known, and an hour off withdraws too little or too much).
    """
    value = text.strip()
    try:  # Python 3.10's fromisoformat does not read a "Z"
        moment = datetime.fromisoformat(
            value[:-1] + "+00:00" if value.endswith(("Z", "z")) else value
        )
    except ValueError:
        moment = None
    if moment is None or moment.tzinfo is None:
        raise SharedCacheError(
            f"{what} is {len(value)} characters that are not an ISO-8601 time with its zone: "
            "write UTC as 2026-12-04T15:00:00Z (or trcomp cache withdraw writes it for you)"
        )
    return math.ceil(moment.timestamp())


def format_moment(seconds: float) -> str:
    """``seconds`` since the epoch as :func:`parse_moment` reads it: ``2026-12-04T15:00:00Z``."""
    return datetime.fromtimestamp(math.ceil(seconds), timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


@dataclass(frozen=True)
class KeySecret:
    """The value of the key's secret: the ``key``, and ``not_before`` (seconds since the epoch;
    None: nothing withdrawn). A plain string is the key alone."""

    key: str = field(repr=False)
    not_before: int | None = None

    @classmethod
    def parse(cls, text: str, *, what: str) -> KeySecret:
        """Read a secret's value; ``what`` names it in errors (which never show the value)."""
        if not text.lstrip().startswith("{"):
            return cls(text)
        try:
            body: Any = json.loads(text)
        except ValueError:
            body = None
        if not isinstance(body, dict) or not isinstance(body.get("key"), str):
            raise SharedCacheError(
                f"{what} starts with '{{' but is not a JSON object with a \"key\" string: write "
                'the key alone, or {"key": "<key>", "not_before": "<time>"} (trcomp cache '
                "withdraw keeps that form)"
            )
        unknown = sorted(set(body) - set(_FIELDS))
        if unknown:
            raise SharedCacheError(
                f"{what} holds the field(s) {', '.join(map(repr, unknown))}, which trcomp does "
                f"not read (it reads {', '.join(_FIELDS)}): remove them; a previous key goes in "
                "its own secret (TRCOMP_SHARED_CACHE_KEY_PREVIOUS_SECRET)"
            )
        moment = body.get("not_before")
        if moment is not None and not isinstance(moment, str):
            raise SharedCacheError(
                f'{what}: "not_before" must be a string such as "2026-12-04T15:00:00Z"'
            )
        not_before = parse_moment(moment, what=f"{what}'s not_before") if moment else None
        return cls(body["key"], not_before)

    def to_text(self) -> str:
        """The secret's value: JSON when a moment is set, else the key alone."""
        if self.not_before is None:
            return self.key
        return json.dumps({"key": self.key, "not_before": format_moment(self.not_before)})


def not_before_of(environ: Mapping[str, Any], secret: KeySecret | None = None) -> int | None:
    """The job's moment: the later of :data:`NOT_BEFORE_ENV` and the key secret's; None.

    Refused without a key: a moment can only be checked against signed times.
    """
    text = str(environ.get(NOT_BEFORE_ENV) or "")
    if NOT_BEFORE_ENV in environ and KEY_ENV not in environ and KEY_SECRET_ENV not in environ:
        raise SharedCacheError(
            f"{NOT_BEFORE_ENV} is set without a key: only signed times can be trusted, so a "
            f"moment withdraws only what the team's key signed. Set {KEY_ENV} (or "
            f"{KEY_SECRET_ENV}) too, or remove {NOT_BEFORE_ENV}."
        )
    if NOT_BEFORE_ENV in environ and not text.strip():
        raise SharedCacheError(
            f"{NOT_BEFORE_ENV} is set but empty: set it to a time (2026-12-04T15:00:00Z) or "
            "remove it"
        )
    moments = [parse_moment(text, what=NOT_BEFORE_ENV)] if text.strip() else []
    if secret is not None and secret.not_before is not None:
        moments.append(secret.not_before)
    return max(moments) if moments else None
