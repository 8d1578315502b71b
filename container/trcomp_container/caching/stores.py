"""Where the shared compile cache's entries are kept: a directory or an S3 prefix.

An entry is one archive (see :mod:`trcomp_container.caching.entry`), written
once and never changed, so both stores only list, get and put whole objects:

- :class:`~.dir_store.DirectoryStore` writes a temp file next to the entry and
  renames it into place, so a reader sees a whole entry or none (POSIX rename; NFS
  and EFS keep it atomic within a directory). The directory must be this user's
  and writable by no one else, under directories only that user or root can change,
  and is checked and used through one open handle (:mod:`.dir_store`);
- :class:`S3Store` puts each entry with one PutObject (S3 makes an object
  visible only once all of it is stored). Every call names the job's account
  as ``ExpectedBucketOwner``; the bucket's owner and its public access are
  checked first (:mod:`trcomp.contract.shared_trust`; the account's Block Public
  Access through S3 Control when the bucket's own settings would not do). Every
  AWS call has a connect and a read timeout and at most two attempts
  (:func:`aws_config`).

A get reads at most the size the listing showed, plus one byte to see that the
entry grew (then it is refused: replaced since the listing), and asks its
caller's ``stop`` between chunks of 1 MiB, so a read whose budget ended stops;
on S3 it names the listed ETag (``IfMatch``: S3 answers 412 for an object
replaced since) and the listed size (``Range``). A store call that hangs anyway
(a file system that stopped answering) is bounded by the caller's wall-clock
budget (:mod:`trcomp_container.caching.shared`).
"""

from __future__ import annotations

import contextlib
import time
import uuid
from collections.abc import Callable, Mapping
from contextlib import AbstractContextManager
from pathlib import Path
from typing import Any, Protocol

from trcomp.contract.shared_cache import (
    SharedCacheLocation,
    aws_call_limits,
    check_bucket_owner,
)
from trcomp.contract.shared_trust import check_bucket_private
from trcomp_container.caching.dir_store import (
    PARTIAL,
    STALE_PARTIAL_S,
    DirectoryStore,
    EntryChanged,
    Listed,
    copy_listed,
)

__all__ = [
    "STALE_PARTIAL_S",
    "Commit",
    "DirectoryStore",
    "EntryChanged",
    "Listed",
    "S3Store",
    "Store",
    "aws_config",
    "open_store",
]

Commit = Callable[[], AbstractContextManager[None]]


class Store(Protocol):
    """The entries of one compatibility set."""

    where: str

    def names(self) -> list[Listed]:
        """Every entry, as listed now."""

    def get(self, listed: Listed, dest: Path, *, stop: Callable[[], bool]) -> None:
        """Copy the entry ``listed`` to the file ``dest``: at most its listed size, else
        :class:`EntryChanged`; :class:`~.budget.Cancelled` once ``stop()`` is true."""

    def put(self, name: str, source: Path, commit: Commit) -> None:
        """Store the file ``source`` as the entry ``name``, atomically; the step that makes
        it visible runs inside ``commit()`` (which refuses once the write budget is spent)."""


def aws_config(timeout_s: float) -> Any:
    """botocore settings for every shared-cache call: bounded connect, read and retries."""
    from botocore.config import Config

    return Config(**aws_call_limits(timeout_s))


class S3Store:
    """Entries as objects under ``s3://<bucket>/<prefix>/<key>/``, with the job's credentials."""

    def __init__(
        self,
        location: SharedCacheLocation,
        key: str,
        region: str | None,
        timeout_s: float,
        *,
        keyed: bool,
    ) -> None:
        import boto3

        session = boto3.session.Session(region_name=region or None)
        config = aws_config(timeout_s)
        self.s3: Any = session.client("s3", config=config)
        s3control = session.client("s3control", config=config)
        sts = session.client("sts", config=config)
        self.account = str(sts.get_caller_identity()["Account"])
        self.bucket = location.bucket
        self.prefix = "/".join(filter(None, [location.prefix, key])) + "/"
        self.where = f"s3://{self.bucket}/{self.prefix}"
        check_bucket_owner(self.s3, self.bucket, self.account, where="in the job")
        check_bucket_private(
            self.s3,
            self.bucket,
            self.account,
            where="in the job",
            keyed=keyed,
            prefix=location.prefix,
            s3control=s3control,
        )

    def names(self) -> list[Listed]:
        found = []
        pages = self.s3.get_paginator("list_objects_v2").paginate(
            Bucket=self.bucket, Prefix=self.prefix, ExpectedBucketOwner=self.account
        )
        for page in pages:
            for item in page.get("Contents", []):
                name = str(item["Key"])[len(self.prefix) :]
                if name.startswith(PARTIAL):
                    self._remove_if_stale(str(item["Key"]), item.get("LastModified"))
                elif name and "/" not in name:
                    size, etag = int(item.get("Size", 0)), str(item.get("ETag", ""))
                    found.append(Listed(name, size, etag))
        return found

    def _remove_if_stale(self, key: str, modified: Any) -> None:
        """Delete a partial upload older than :data:`STALE_PARTIAL_S` (its writer died)."""
        if modified is not None and time.time() - modified.timestamp() > STALE_PARTIAL_S:
            self._delete(key)

    def _delete(self, key: str) -> None:
        """Delete ``key``; one we may not delete, or gone meanwhile, is never read anyway."""
        from botocore.exceptions import BotoCoreError, ClientError

        with contextlib.suppress(BotoCoreError, ClientError):
            self.s3.delete_object(Bucket=self.bucket, Key=key, ExpectedBucketOwner=self.account)

    def get(self, listed: Listed, dest: Path, *, stop: Callable[[], bool]) -> None:
        # IfMatch: an object replaced since the listing is refused (412) before a byte of
        # it is sent; Range: whatever S3 holds, no more than the listed size plus one.
        match = {"IfMatch": listed.version} if listed.version else {}
        response = self.s3.get_object(
            Bucket=self.bucket,
            Key=self.prefix + listed.name,
            ExpectedBucketOwner=self.account,
            Range=f"bytes=0-{listed.size}",
            **match,
        )
        body = response["Body"]
        try:
            copy_listed(body, dest, listed, stop)
        finally:
            body.close()

    def put(self, name: str, source: Path, commit: Commit) -> None:
        # Uploaded under a partial name, then copied to its own inside commit(): an upload
        # that outlasts the write budget never becomes an entry.
        staged = f"{self.prefix}{PARTIAL}{uuid.uuid4().hex}"
        owner = {"ExpectedBucketOwner": self.account}
        try:
            with source.open("rb") as body:
                self.s3.put_object(Bucket=self.bucket, Key=staged, Body=body, **owner)
            with commit():  # past the budget: the entry never appears
                self.s3.copy_object(
                    Bucket=self.bucket,
                    Key=self.prefix + name,
                    CopySource={"Bucket": self.bucket, "Key": staged},
                    ExpectedSourceBucketOwner=self.account,
                    **owner,
                )
        finally:
            self._delete(staged)  # one left behind is never read; a later lister removes it


def open_store(
    location: SharedCacheLocation,
    key: str,
    environ: Mapping[str, str],
    *,
    keyed: bool,
    timeout_s: float = 5.0,
) -> Store:
    """The store of ``location`` for the compatibility set ``key``; each call ``timeout_s``.

    ``keyed``: whether the job has a signing key; a bucket others may write is refused
    to a job without one."""
    if location.kind == "s3":
        region = environ.get("AWS_REGION") or environ.get("AWS_DEFAULT_REGION")
        return S3Store(location, key, region, timeout_s, keyed=keyed)
    if location.kind == "file":
        return DirectoryStore(Path(location.path) / key)
    raise ValueError(f"{location.kind}:// keeps no entries of its own (inductor talks to it)")
