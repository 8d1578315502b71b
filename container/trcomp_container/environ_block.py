"""Secrets blanked in the environment a process was started with, as other processes read it.

A process's environment as it was started stays in its memory, and every process of the
same user reads it there (``/proc/<pid>/environ``), whatever the process did to
``os.environ`` since: the user's script, a child of the entrypoint, read the team's key
in the entrypoint's, though its own environment held none; a child the script starts
could read the Redis password and the key in the script's, after the start-up hook took
them out of ``os.environ``.

:func:`blank` overwrites the values of the named variables in that block (Linux's
``env_start``..``env_end``, from ``/proc/self/stat``) with NUL bytes, after giving each
one still in ``os.environ`` a copy of its own (``setenv``), so the process and the
children it starts as before keep it. Elsewhere than Linux it does nothing. Standard
library only: the start-up hook imports it.
"""

from __future__ import annotations

import ctypes
import os
from collections.abc import Collection

__all__ = ["blank"]

_ENV_START = 47
"""``env_start``'s index among /proc/self/stat's fields after the command's ``)`` (field 50)."""


def blank(names: Collection[str]) -> int:
    """Blank the values of ``names`` in this process's original environment block; how many
    were blanked (0 where the block cannot be found)."""
    try:
        with open("/proc/self/stat", "rb") as stat:
            fields = stat.read().rsplit(b")", 1)[1].split()
        start, end = int(fields[_ENV_START]), int(fields[_ENV_START + 1])
    except (OSError, IndexError, ValueError):
        return 0
    if not 0 < start < end:
        return 0
    wanted = {name.encode() for name in names}
    blanked = 0
    offset = 0
    for entry in ctypes.string_at(start, end - start).split(b"\0"):
        name, equals, value = entry.partition(b"=")
        if equals and value and name in wanted:
            live = os.environ.get(name.decode())
            if live is not None:  # the C environment points at a copy from now on
                os.putenv(name.decode(), live)
            ctypes.memset(start + offset + len(name) + 1, 0, len(value))
            blanked += 1
        offset += len(entry) + 1
    return blanked
