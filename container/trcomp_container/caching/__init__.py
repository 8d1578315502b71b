"""The compile caches of a job: the lineage's, in the checkpoint location, and the shared one.

- :mod:`.lineage`: the live cache dir on local disk, restored from and
  persisted to the checkpoint location;
- :mod:`.lineage_signed`: the same in a job with the team's key, which restores
  only files listed in a manifest a keyed job signed;
- :mod:`.job_setup`: what the entrypoint does about caches before the start-up
  check (opens the shared cache, the variables of the user's process);
- :mod:`.compat`: the compatibility set, the key entries are kept under;
- :mod:`.shared`: the shared cache (``shared_cache=``) of one job, read at the
  start and written at the end;
- :mod:`.entry`: one entry of the shared cache (name, signature, archive);
- :mod:`.stores`: where entries are kept (a directory, an S3 prefix);
- :mod:`.redis_cache`: a ``redis://`` shared cache (inductor's remote caches);
- :mod:`.cache_secrets`: the signing key and the Redis password;
- :mod:`.budget`: the wall-clock budget of the shared cache's reads and writes.
"""

from __future__ import annotations

__all__: list[str] = []
