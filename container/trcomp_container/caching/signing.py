"""The one signing scheme of the team's key: shared-cache entries and Redis values alike.

Three kinds of things are signed: shared-cache entries, Redis values and the manifest of
a keyed job's lineage (its compile cache in its checkpoint location).
A signature is an HMAC-SHA256, keyed with the team's key, over a *purpose* (what kind
of thing is signed, and the scheme's version), the time the thing was written (whole
seconds since the epoch, UTC) and the thing's fields, each prefixed with its length:
no split of the same bytes into other fields, and no signature of one purpose, reads as
another's. An entry's signature never verifies as a Redis value's, nor the reverse.

:class:`Keys` holds what a job checks with: the current key (which signs), the previous
one while the team rotates keys, and the team's ``not_before``
(:mod:`trcomp.contract.withdrawal`): anything signed earlier is withdrawn.
:func:`check` tries every key, in constant time each, whichever matches, and says why
a signature is refused. Standard library only: the start-up hook imports it.
"""

from __future__ import annotations

import hashlib
import hmac
import time
from dataclasses import dataclass, field
from typing import Literal

__all__ = [
    "ENTRY",
    "LINEAGE_MANIFEST",
    "MAC_BYTES",
    "PURPOSES",
    "REDIS_VALUE",
    "Keys",
    "Verdict",
    "check",
    "mac",
    "sign",
    "written_at",
]

ENTRY = "trcomp-shared-cache-entry/3"
"""An entry of a ``file://`` or S3 shared cache: its compatibility set and SHA-256.
(/1 signed the set and the digest; /2 the time too, in a scheme of its own.)"""
REDIS_VALUE = "trcomp-redis-value/2"
"""A value of inductor's Redis remote caches: its Redis key name and bytes.
(/1 had no time, in a scheme of its own.)"""
LINEAGE_MANIFEST = "trcomp-lineage-manifest/1"
"""The manifest of a keyed job's compile cache in its checkpoint location (its lineage):
each file's path, size and SHA-256 (:mod:`.lineage_signed`)."""
PURPOSES = (ENTRY, REDIS_VALUE, LINEAGE_MANIFEST)
MAC_BYTES = 32

Verdict = Literal["ok", "bad", "withdrawn", "future"]
"""``ok``; ``bad``: no key of the job signed these fields at that time for this purpose;
``withdrawn``: one did, before the team's ``not_before``; ``future``: one did, dated more
than :data:`FUTURE_SKEW_S` ahead of this machine's clock."""
FUTURE_SKEW_S = 300
"""How far ahead of the reader's clock a signed time may be (clocks of two machines differ
by seconds under NTP). A time further ahead is refused: only a key holder can sign one,
but a copy dated ahead would outlive every later withdrawal (``not_before``)."""


@dataclass(frozen=True)
class Keys:
    """The team's keys as a job holds them: ``keys`` (the current first: it signs; then the
    previous one while keys rotate; empty: the job has no key) and ``not_before`` (seconds
    since the epoch: what was signed earlier is withdrawn; None: nothing is)."""

    keys: tuple[bytes, ...] = field(default=(), repr=False)
    not_before: int | None = None

    def __bool__(self) -> bool:
        return bool(self.keys)

    @property
    def current(self) -> bytes | None:
        """The key that signs; None without a key."""
        return self.keys[0] if self.keys else None


def written_at(now: float | None = None) -> int:
    """The time a signature carries: whole seconds, rounded down (what was written before a
    ``not_before``, rounded up, stays before it)."""
    return int(time.time() if now is None else now)


def mac(key: bytes, purpose: str, when: int, *fields: bytes) -> bytes:
    """The HMAC-SHA256 of ``fields`` written at ``when`` (seconds), for ``purpose``."""
    if purpose not in PURPOSES:
        raise ValueError(f"unknown signing purpose {purpose!r}: one of {PURPOSES}")
    parts = (purpose.encode(), str(int(when)).encode(), *fields)
    message = b"".join(len(part).to_bytes(8, "big") + part for part in parts)
    return hmac.new(key, message, hashlib.sha256).digest()


def sign(key: bytes, purpose: str, when: int, *fields: bytes) -> bytes:
    """The signature of ``fields`` written at ``when`` with ``key`` (a job's current key:
    :attr:`Keys.current`)."""
    return mac(key, purpose, when, *fields)


def check(
    keys: Keys, purpose: str, when: int, signature: bytes, *fields: bytes, now: float | None = None
) -> Verdict:
    """Whether ``signature`` is one of ``keys``' over ``fields`` at ``when`` for ``purpose``,
    not withdrawn and not dated ahead of ``now`` (this machine's clock) by more than
    :data:`FUTURE_SKEW_S`. Every key is tried, none skipped: the time taken says nothing about
    which matched. A signature is checked before its time is believed."""
    matched = sum(
        hmac.compare_digest(signature, mac(key, purpose, when, *fields)) for key in keys.keys
    )
    if not matched:
        return "bad"
    if keys.not_before is not None and when < keys.not_before:
        return "withdrawn"
    if when > (time.time() if now is None else now) + FUTURE_SKEW_S:
        return "future"
    return "ok"
