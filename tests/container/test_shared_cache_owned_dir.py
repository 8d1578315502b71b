"""A keyless ``file://`` shared cache is trusted by construction: opened once, used by handle.

Issue 43, attack 3: a location that did not exist yet, under a world-writable sticky
folder like ``/tmp``; another local user renamed a folder of their own in after the
job's check (which skipped what did not exist) and before the store listed the path:
the job unpacked that user's entry. Now the job creates the location (mode 0700) and
checks it through one open handle, and lists, reads and writes relative to that
handle: a rename after the check changes nothing it reads.

Real directories, a real second user (a child process running as another uid), a
real job's reads and writes (:func:`open_shared_cache`).
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.container.test_shared_cache_trust import COMPAT, _files, _live_with, _open, _plant
from trcomp.contract.errors import SharedCacheError
from trcomp_container.caching.dir_store import DirectoryStore

OTHER_UID = 4242  # no account needed: the kernel tells users apart by uid


@pytest.fixture
def sticky() -> Iterator[Path]:
    """A folder like /tmp (mode 1777, root's), that another user can reach: under /tmp,
    since pytest's own temp folders are 0700."""
    if os.geteuid() != 0:
        pytest.skip("acting as another local user needs root")
    folder = Path(tempfile.mkdtemp(prefix="trcomp-sticky-", dir="/tmp"))
    folder.chmod(0o1777)
    try:
        yield folder
    finally:
        shutil.rmtree(folder, ignore_errors=True)


def _as_other_user(code: str) -> subprocess.CompletedProcess[str]:
    """Run ``code`` in a Python process of another local user (uid and gid 4242)."""
    # The system's Python: the test's own may sit where only root can read (~root/.pyenv).
    python = shutil.which("python3", path="/usr/bin:/bin") or sys.executable
    return subprocess.run(
        [python, "-I", "-c", code],
        user=OTHER_UID,
        group=OTHER_UID,
        extra_groups=[],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )


def _planted_by_other_user(sticky: Path) -> Path:
    """Another user's folder holding an unsigned entry of the job's compatibility set."""
    theirs = sticky / "theirs"
    _plant(theirs / COMPAT.key, [("inductor/fxgraph/evil", b"import os  # planted")])
    for path in (theirs, *theirs.rglob("*")):
        os.chown(path, OTHER_UID, OTHER_UID)
    return theirs


def test_another_users_folder_renamed_in_after_the_check_is_never_read(sticky, monkeypatch):
    """The attack, made deterministic: the other user renames their folder in at the
    moment the old code was open to it, between the check and the listing. Before, the
    job listed the path and unpacked the planted entry; now the location is the job's
    (created 0700 at the check), the rename is refused by the kernel (sticky folder), and
    the job reads its own, empty, folder."""
    location = sticky / "team-cache"  # does not exist yet
    theirs = _planted_by_other_user(sticky)
    names = DirectoryStore.names
    renames: list[subprocess.CompletedProcess[str]] = []

    def rename_in_then_list(self: DirectoryStore):
        renames.append(
            _as_other_user(
                "import os, sys\n"
                f"try:\n    os.rename({str(theirs)!r}, {str(location)!r})\n"
                "except OSError as exc:\n    sys.exit(f'refused: {exc}')\n"
            )
        )
        return names(self)

    monkeypatch.setattr(DirectoryStore, "names", rename_in_then_list)
    live = sticky / "job" / "live"
    cache = _open(f"file://{location}", live)
    assert len(renames) == 1
    assert cache.facts["files_read"] == 0 and _files(live) == []  # 1 and ["evil"] before
    assert renames[0].returncode != 0 and "refused" in renames[0].stderr, renames[0]
    assert theirs.exists()  # still theirs, where they left it
    info = location.stat()
    assert (info.st_uid, info.st_mode & 0o777) == (os.geteuid(), 0o700)


def test_another_users_folder_already_there_is_refused(sticky):
    """Renamed in before the job started: the location is not the job's user's."""
    location = sticky / "team-cache"
    _planted_by_other_user(sticky).rename(location)
    live = sticky / "job" / "live"
    with pytest.raises(SharedCacheError, match=f"team-cache is owned by uid {OTHER_UID}"):
        _open(f"file://{location}", live)
    assert _files(live) == []


def test_a_location_swapped_after_it_was_opened_is_still_the_one_read_and_written(
    tmp_path, monkeypatch
):
    """Whoever could rename the location (here the job's own user) swaps it for a planted
    one after the job opened it: the job lists, reads and writes the folder it checked
    (it read the planted entry and wrote beside it before)."""
    shared = tmp_path / "shared"
    _plant(shared / COMPAT.key, [("inductor/good", b"the team's")])
    planted = tmp_path / "planted"
    _plant(planted / COMPAT.key, [("inductor/evil", b"planted")])
    moved = tmp_path / "moved-away"
    names = DirectoryStore.names

    def swap_then_list(self: DirectoryStore):
        shared.rename(moved)
        planted.rename(shared)
        return names(self)

    monkeypatch.setattr(DirectoryStore, "names", swap_then_list)
    live = _live_with(tmp_path / "a", {})
    cache = _open(f"file://{shared}", live)
    assert sorted(p.name for p in _files(live)) == ["good"]  # ["evil"] before
    (live / "inductor" / "new").write_bytes(b"compiled here")
    assert cache.finish(live, succeeded=True)["files_written"] == 1
    assert len(list((moved / COMPAT.key).iterdir())) == 2  # the job's entry went here
    assert len(list((shared / COMPAT.key).iterdir())) == 1  # not beside the planted one


def test_a_link_in_place_of_a_component_after_the_path_was_resolved_is_refused(tmp_path):
    """Between resolving the path and opening it, a component became a link: no link is
    followed once the walk starts, so the job refuses it instead of going where it points."""
    from trcomp.contract.owned_dirs import open_child, open_directory

    (tmp_path / "elsewhere").mkdir()
    (tmp_path / "team").symlink_to(tmp_path / "elsewhere")
    parent = open_directory(tmp_path, where="in the job")
    assert parent is not None
    try:
        with pytest.raises(SharedCacheError, match="team is not a directory"):
            open_child(parent, "team", shown=tmp_path / "team", at=tmp_path / "team",
                       where="in the job")  # fmt: skip
    finally:
        os.close(parent)


def test_an_entry_another_user_left_before_the_folder_was_locked_down_is_not_read(sticky):
    """The team's folder was writable by others (mode 0777) when another user wrote an
    entry into it; the job refused the folder and said ``chmod go-w``, which its user did.
    The folder now passes, but the entry is still the other user's, who can also rewrite
    it in place whenever they like (the folder stays open to them for reading): before, the
    keyless job unpacked it. Now an entry is read only when it is the job's user's and
    writable by no one else, checked on the open file; the entry is named in a warning."""
    location = sticky / "team-cache"
    (location / COMPAT.key).mkdir(parents=True)
    for folder in (location, location / COMPAT.key):
        folder.chmod(0o777)
    planted = _plant(sticky / "staging", [("inductor/fxgraph/evil", b"import os  # planted")])
    wrote = _as_other_user(  # the other user writes the entry into the open folder
        f"import shutil; shutil.copyfile({str(planted)!r}, "
        f"{str(location / COMPAT.key / planted.name)!r})"
    )
    assert wrote.returncode == 0, wrote.stderr
    for folder in (location, location / COMPAT.key):  # the fix the refusal names
        folder.chmod(0o755)
    assert (location / COMPAT.key / planted.name).stat().st_uid == OTHER_UID
    live = sticky / "job" / "live"
    cache = _open(f"file://{location}", live)
    assert _files(live) == []  # ["evil"] before
    assert cache.facts["entries_skipped"] == 1
    assert any(f"owned by uid {OTHER_UID}" in warning for warning in cache.warnings)
