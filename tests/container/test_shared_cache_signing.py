"""What a signature of the shared compile cache attests, and which keys a job holds.

In process, against real directories: the steps of a job that touch its caches
(:func:`~trcomp_container.caching.job_setup.open_for_job`, then
:func:`~trcomp_container.caching.job_setup.restore_lineage`, what the job compiles,
:meth:`~trcomp_container.caching.shared.SharedCache.finish`), as the entrypoint runs
them; a real job would add only the compiling.
"""

from __future__ import annotations

import hashlib
import hmac
import os
import shutil
from pathlib import Path

import pytest

from trcomp.contract.config import TrainingCompilerConfig
from trcomp.contract.errors import SharedCacheError
from trcomp.shared_cache_checks import check_shared_cache
from trcomp_container.caching import job_setup, lineage
from trcomp_container.caching.compat import CompatSet, compat_set
from trcomp_container.caching.shared import SharedCache, open_shared_cache
from trcomp_container.devices import Devices
from trcomp_container.job import Job, JobPaths

KEY = "team-a-key-0123456789abcdef"
COMPAT = compat_set(engine="inductor", gpu_listing=None)
PLANTED = "inductor/fxgraph/pl/fplanted/0"  # where inductor keeps a pickled FX graph


def _job(base: Path, environ: dict[str, str]) -> Job:
    return Job(
        paths=JobPaths.under(base),
        framework_params={},
        user_args=[],
        toolkit_env={},
        entry_point="train.py",
        module_dir="",
        hosts=["algo-1"],
        current_host="algo-1",
        num_gpus=0,
        num_cpus=2,
        environ=environ,
        instance_type="local_process",
    )


def _start(config: TrainingCompilerConfig, job: Job, live: Path) -> SharedCache:
    """The entrypoint's cache steps before the script: shared cache first, lineage second."""
    shared = job_setup.open_for_job(config, job, Devices(), live, engine="inductor")
    assert shared is not None
    signed = job_setup.signed_lineage(job.environ, shared, timeout_s=5)
    job_setup.restore_lineage(job.paths.cache, live, shared, signed)
    return shared


def _signed_lineage(job: Job, files: dict[str, bytes]) -> None:
    """What an earlier keyed job of ``job``'s lineage left in its checkpoint location."""
    live = job.paths.base / "earlier-live"
    for relative, body in files.items():
        (live / relative).parent.mkdir(parents=True, exist_ok=True)
        (live / relative).write_bytes(body)
    signed = job_setup.signed_lineage(job.environ, None, timeout_s=5)
    assert signed is not None
    signed.persist(live, job.paths.cache)


def _files(live: Path) -> set[str]:
    return {p.relative_to(live).as_posix() for p in live.rglob("*") if p.is_file()}


def test_files_restored_from_the_lineage_are_never_signed_into_the_team_cache(tmp_path):
    config = TrainingCompilerConfig(backend="inductor", shared_cache=f"file://{tmp_path / 's'}")
    environ = {"TRCOMP_SHARED_CACHE_KEY": KEY}
    victim = _job(tmp_path / "victim", environ)
    # An earlier keyed job of the lineage signed one file; then someone without the key
    # writes the victim's checkpoint location.
    _signed_lineage(victim, {"inductor/fxgraph/re/frewritten/0": b"lineage's, compiled again"})
    rewritten = victim.paths.cache / "inductor/fxgraph/re/frewritten/0"
    planted_mtime = rewritten.stat().st_mtime_ns
    planted = victim.paths.cache / PLANTED
    planted.parent.mkdir(parents=True)
    planted.write_bytes(b"cos\nsystem\n(S'echo planted'\ntR.")  # a pickle that runs a command

    live = tmp_path / "victim-live"
    shared = _start(config, victim, live)
    assert not (live / PLANTED).exists()  # a keyed job restores only signed lineage files
    assert (live / "inductor/fxgraph/re/frewritten/0").is_file()
    # What the job compiles: a new graph, and one the lineage had, written again.
    (live / "inductor/fxgraph/ow/fown/0").parent.mkdir(parents=True)
    (live / "inductor/fxgraph/ow/fown/0").write_bytes(b"compiled by the job")
    (live / "inductor/fxgraph/re/frewritten/0").write_bytes(b"the job's own, same size")
    # Same size and mtime as the planted file (its writer chose the mtime): still the job's.
    os.utime(live / "inductor/fxgraph/re/frewritten/0", ns=(planted_mtime, planted_mtime))
    lineage.persist(live, victim.paths.cache)
    facts = shared.finish(live, succeeded=True)
    assert facts["lineage_files_left_out"] == 1
    assert facts["files_written"] == 2, facts

    reader_live = tmp_path / "reader-live"
    reader = _start(config, _job(tmp_path / "reader", environ), reader_live)
    assert reader.facts["entries_read"] == 1
    assert _files(reader_live) == {"inductor/fxgraph/ow/fown/0", "inductor/fxgraph/re/frewritten/0"}
    assert (reader_live / "inductor/fxgraph/re/frewritten/0").read_bytes().startswith(b"the job")
    assert not (reader_live / PLANTED).exists()


def test_a_lineage_file_the_shared_cache_also_had_is_not_signed_again(tmp_path):
    """The lineage copies a file of another size over the shared cache's: that file is the
    lineage's now, and stays out of the job's entry."""
    uri = f"file://{tmp_path / 's'}"
    first = tmp_path / "first"
    (first / "inductor/g").parent.mkdir(parents=True)
    (first / "inductor/g").write_bytes(b"signed graph")
    environ = {"TRCOMP_SHARED_CACHE_KEY": KEY}
    open_shared_cache(
        uri, compat=COMPAT, engine="inductor", live=first, environ=environ, remote_job=False
    ).finish(first, succeeded=True)

    config = TrainingCompilerConfig(backend="inductor", shared_cache=uri)
    job = _job(tmp_path / "second", environ)
    _signed_lineage(job, {"inductor/g": b"the lineage's graph, signed"})
    live = tmp_path / "second-live"
    shared = _start(config, job, live)
    assert (live / "inductor/g").read_bytes() == b"the lineage's graph, signed"
    facts = shared.finish(live, succeeded=True)
    assert facts["files_written"] == 0 and "entry_written" not in facts


def _one_signed_entry(tmp_path: Path, compat: CompatSet = COMPAT) -> Path:
    live = tmp_path / "writer-live"
    (live / "inductor/g").parent.mkdir(parents=True)
    (live / "inductor/g").write_bytes(b"signed graph")
    environ = {"TRCOMP_SHARED_CACHE_KEY": KEY}
    open_shared_cache(
        f"file://{tmp_path / 's'}", compat=compat, engine="inductor", live=live,
        environ=environ, remote_job=False,
    ).finish(live, succeeded=True)  # fmt: skip
    (entry,) = (tmp_path / "s" / compat.key).iterdir()
    return entry


def _read_with_key(tmp_path: Path, name: str) -> SharedCache:
    return open_shared_cache(
        f"file://{tmp_path / 's'}", compat=COMPAT, engine="inductor", live=tmp_path / name,
        environ={"TRCOMP_SHARED_CACHE_KEY": KEY}, remote_job=False,
    )  # fmt: skip


def test_a_signed_entry_copied_under_a_later_time_is_refused(tmp_path):
    entry = _one_signed_entry(tmp_path)
    rest = entry.name.split("-", 1)[1]
    replayed = entry.with_name(f"21000101T000000Z-{rest}")  # newest: read first, if at all
    shutil.copyfile(entry, replayed)
    cache = _read_with_key(tmp_path, "reader")
    assert cache.facts["entries_found"] == 2
    assert cache.facts["entries_read"] == 1 and cache.facts["entries_skipped"] == 1
    (warning,) = cache.warnings
    assert replayed.name in warning and "copied under another time" in warning
    # The original still reads: the replay cost the reader nothing but a skip.
    assert (tmp_path / "reader" / "inductor/g").read_bytes() == b"signed graph"


def test_a_signed_entry_moved_to_another_compatibility_set_is_refused(tmp_path):
    other = compat_set(engine="inductor", gpu_listing="GPU 0: NVIDIA A10G (UUID: GPU-1)")
    entry = _one_signed_entry(tmp_path, other)
    (tmp_path / "s" / COMPAT.key).mkdir()
    entry.rename(tmp_path / "s" / COMPAT.key / entry.name)
    cache = _read_with_key(tmp_path, "reader")
    assert cache.facts["entries_skipped"] == 1 and cache.facts["files_read"] == 0
    assert "from another set" in cache.warnings[0]
    assert not list((tmp_path / "reader").rglob("g"))


def test_an_entry_signed_without_its_time_is_refused(tmp_path):
    """The first signatures covered the set and the digest only: no longer read."""
    entry = _one_signed_entry(tmp_path)
    stamp, digest, _ = entry.name.removesuffix(".tar.gz").split("-")
    message = f"trcomp-shared-cache-entry/1\n{COMPAT.key}\n{digest}".encode()
    old_mac = hmac.new(KEY.encode(), message, hashlib.sha256).hexdigest()
    entry.rename(entry.with_name(f"{stamp}-{digest}-{old_mac}.tar.gz"))
    cache = _read_with_key(tmp_path, "reader")
    assert cache.facts["entries_skipped"] == 1 and cache.facts["files_read"] == 0
    assert "signed by an older trcomp" in cache.warnings[0]


NEW_KEY = "team-a-key-2-fedcba9876543210"


def _rotating(key: str, previous: str | None = None) -> dict[str, str]:
    environ = {"TRCOMP_SHARED_CACHE_KEY": key}
    if previous is not None:
        environ["TRCOMP_SHARED_CACHE_KEY_PREVIOUS"] = previous
    return environ


def _open_with(tmp_path: Path, name: str, environ: dict[str, str]) -> SharedCache:
    return open_shared_cache(
        f"file://{tmp_path / 's'}", compat=COMPAT, engine="inductor", live=tmp_path / name,
        environ=environ, remote_job=False,
    )  # fmt: skip


def test_while_keys_rotate_a_job_reads_entries_of_both_and_signs_with_the_new(tmp_path):
    old_entry = _one_signed_entry(tmp_path)  # signed with KEY, the team's old key

    only_new = _open_with(tmp_path, "only-new", _rotating(NEW_KEY))
    assert only_new.facts["entries_skipped"] == 1 and only_new.facts["files_read"] == 0
    assert "signature is not this job's key's" in only_new.warnings[0]

    rotating = _open_with(tmp_path, "rotating", _rotating(NEW_KEY, previous=KEY))
    assert rotating.facts["files_read"] == 1 and rotating.facts["previous_key"] is True
    assert (tmp_path / "rotating" / "inductor/g").read_bytes() == b"signed graph"
    (tmp_path / "rotating" / "inductor/h").write_bytes(b"compiled while rotating")
    written = rotating.finish(tmp_path / "rotating", succeeded=True)["entry_written"]
    assert written != old_entry.name

    # The new entry is signed with the new key only: the old key alone does not read it.
    old_entry.unlink()
    assert _open_with(tmp_path, "new-again", _rotating(NEW_KEY)).facts["files_read"] == 1
    old_only = _open_with(tmp_path, "old-only", _rotating(KEY))
    assert old_only.facts["entries_skipped"] == 1 and old_only.facts["files_read"] == 0


@pytest.mark.parametrize(
    ("environ", "says"),
    [
        ({"TRCOMP_SHARED_CACHE_KEY_PREVIOUS": KEY}, "is set without a current key"),
        ({"TRCOMP_SHARED_CACHE_KEY_PREVIOUS_SECRET": "team-old-key"}, "without a current key"),
        (_rotating(NEW_KEY, previous=" "), "TRCOMP_SHARED_CACHE_KEY_PREVIOUS is set but empty"),
        (_rotating(NEW_KEY, previous="short"), "PREVIOUS.* is 5 bytes; it must be at least 16"),
    ],
)
def test_a_previous_key_follows_the_current_keys_rules(tmp_path, environ, says):
    with pytest.raises(SharedCacheError, match=says) as caught:
        _open_with(tmp_path, "live", environ)
    assert KEY not in str(caught.value)


def test_the_sdk_refuses_a_previous_key_in_hyperparameters_or_in_clear_on_sagemaker(tmp_path):
    config = TrainingCompilerConfig(backend="inductor", shared_cache=f"file://{tmp_path / 's'}")
    environment = _rotating(NEW_KEY, previous=KEY)
    for hyperparameters, says in [
        ({"trcomp-shared-cache-key-previous": KEY}, "'trcomp-shared-cache-key-previous'"),
        ({"old": f'"{KEY}"'}, "hyperparameter 'old' holds a shared cache secret"),
    ]:
        with pytest.raises(SharedCacheError, match=says) as caught:
            check_shared_cache(
                config, mode="process", environment=environment, hyperparameters=hyperparameters
            )
        assert KEY not in str(caught.value)
    with pytest.raises(SharedCacheError, match="PREVIOUS' holds a shared cache secret in clear"):
        check_shared_cache(
            config, mode="remote", environment={
                "TRCOMP_SHARED_CACHE_KEY_SECRET": "arn:aws:secretsmanager:us-west-2:1:secret:k",
                "TRCOMP_SHARED_CACHE_KEY_PREVIOUS": KEY,
            },
        )  # fmt: skip
    with pytest.raises(SharedCacheError, match="without a current key"):
        check_shared_cache(
            config, mode="process", environment={"TRCOMP_SHARED_CACHE_KEY_PREVIOUS": KEY}
        )
