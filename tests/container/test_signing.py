"""The one signing module: a signature of one purpose never verifies as another's, every
field and the time are covered, and what was signed before the team's not_before is
withdrawn. Then both users of it, through their own code: an entry's name and a Redis
value, each refused when given the other's signature over the very same bytes.
"""

from __future__ import annotations

import hashlib
import time

import pytest

from trcomp_container.caching import signing
from trcomp_container.caching.compat import compat_set
from trcomp_container.caching.entry import EntryError, check_name, entry_name
from trcomp_container.caching.signing import ENTRY, REDIS_VALUE, Keys, check, mac, sign
from trcomp_container.inprocess.patches import redis_backend

KEY = b"team-key-0123456789abcdef"
OTHER = b"other-key-0123456789abcdef"
WHEN = 1_700_000_000  # 2023-11-14: in the past (a time ahead of the clock is refused)
COMPAT = compat_set(engine="inductor", gpu_listing=None)


def test_a_mac_of_one_purpose_does_not_verify_as_another():
    fields = (b"name-or-set", b"value-or-digest")
    entry_mac = sign(KEY, ENTRY, WHEN, *fields)
    assert check(Keys((KEY,)), ENTRY, WHEN, entry_mac, *fields) == "ok"
    assert check(Keys((KEY,)), REDIS_VALUE, WHEN, entry_mac, *fields) == "bad"
    redis_mac = sign(KEY, REDIS_VALUE, WHEN, *fields)
    assert check(Keys((KEY,)), ENTRY, WHEN, redis_mac, *fields) == "bad"
    assert entry_mac != redis_mac
    with pytest.raises(ValueError, match="unknown signing purpose"):
        mac(KEY, "trcomp-something-else/1", WHEN, *fields)


def test_the_fields_their_split_and_the_time_are_all_signed():
    signature = sign(KEY, ENTRY, WHEN, b"ab", b"c")
    keys = Keys((KEY,))
    assert check(keys, ENTRY, WHEN, signature, b"ab", b"c") == "ok"
    assert check(keys, ENTRY, WHEN, signature, b"a", b"bc") == "bad"  # same bytes, other split
    assert check(keys, ENTRY, WHEN, signature, b"abc") == "bad"
    assert check(keys, ENTRY, WHEN + 1, signature, b"ab", b"c") == "bad"  # another time
    assert check(Keys((OTHER,)), ENTRY, WHEN, signature, b"ab", b"c") == "bad"
    assert check(Keys((OTHER, KEY)), ENTRY, WHEN, signature, b"ab", b"c") == "ok"  # previous
    assert check(Keys(), ENTRY, WHEN, signature, b"ab", b"c") == "bad"  # no key trusts nothing


def test_what_was_signed_before_not_before_is_withdrawn_and_a_forgery_stays_bad():
    signature = sign(KEY, REDIS_VALUE, WHEN, b"v")
    assert check(Keys((KEY,), not_before=WHEN), REDIS_VALUE, WHEN, signature, b"v") == "ok"
    assert check(Keys((KEY,), WHEN + 1), REDIS_VALUE, WHEN, signature, b"v") == "withdrawn"
    # A time moved past the moment is no longer the signed one: bad, not a way around it.
    assert check(Keys((KEY,), WHEN + 1), REDIS_VALUE, WHEN + 2, signature, b"v") == "bad"
    assert signing.written_at(WHEN + 0.99) == WHEN  # rounded down: before stays before


def test_a_redis_values_signature_is_refused_as_an_entrys_name():
    """Someone with the Redis password gets a keyed job to sign a value whose name is a
    compatibility set and whose bytes are an entry's digest: the MAC covers the same
    two fields an entry's does, yet its purpose differs, so the entry is refused."""
    digest = hashlib.sha256(b"planted archive").hexdigest()
    stored = redis_backend.sign(KEY, COMPAT.key, digest.encode(), when=WHEN)
    start = len(redis_backend.HEADER) + 8
    stolen = stored[start : start + signing.MAC_BYTES].hex()
    honest = entry_name(digest, COMPAT.key, KEY, when=WHEN)
    stamp = honest.split("-", 1)[0]
    assert check_name(honest, COMPAT.key, Keys((KEY,))) == digest
    with pytest.raises(EntryError, match="signature is not this job's key's"):
        check_name(f"{stamp}-{digest}-{stolen}.tar.gz", COMPAT.key, Keys((KEY,)))


def test_an_entrys_signature_is_refused_as_a_redis_value():
    digest = hashlib.sha256(b"archive").hexdigest()
    name = entry_name(digest, COMPAT.key, KEY, when=WHEN)
    entry_mac = bytes.fromhex(name.removesuffix(".tar.gz").rsplit("-", 1)[1])
    forged = redis_backend.HEADER + WHEN.to_bytes(8, "big") + entry_mac + digest.encode()
    assert redis_backend.checked(Keys((KEY,)), COMPAT.key, forged) == ("bad", None)
    honest = redis_backend.sign(KEY, COMPAT.key, digest.encode(), when=WHEN)
    assert redis_backend.checked(Keys((KEY,)), COMPAT.key, honest) == ("ok", digest.encode())


def test_a_time_signed_ahead_of_the_clock_is_refused_in_every_user():
    """Only a key holder can sign a time, but a copy dated a year ahead would outlive every
    withdrawal: a time more than FUTURE_SKEW_S ahead of the reader's clock is refused."""
    keys = Keys((KEY,))
    ahead = int(time.time()) + 365 * 86400
    fields = (b"name", b"value")
    signature = sign(KEY, ENTRY, ahead, *fields)
    assert check(keys, ENTRY, ahead, signature, *fields) == "future"
    assert check(keys, ENTRY, ahead, signature, *fields, now=ahead) == "ok"
    near = int(time.time()) + signing.FUTURE_SKEW_S // 2  # clocks differ a little: read
    assert check(keys, ENTRY, near, sign(KEY, ENTRY, near, *fields), *fields) == "ok"
    name = entry_name("a" * 64, COMPAT.key, KEY, when=ahead)
    with pytest.raises(EntryError, match="ahead of this machine's clock"):
        check_name(name, COMPAT.key, keys)
    stored = redis_backend.sign(KEY, "fx-graph-v1:abc", b"graph", when=ahead)
    assert redis_backend.checked(keys, "fx-graph-v1:abc", stored) == ("future", None)
