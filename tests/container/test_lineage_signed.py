"""A keyed job's lineage: only files a keyed job signed in the checkpoint location are restored.

In process, against real directories, through the entrypoint's own steps
(:func:`~trcomp_container.caching.job_setup.signed_lineage`, ``restore_lineage``, the
job's compiling, ``persist``): a child job would add only the compiling, which
``test_lineage_signed_job.py`` does once, end to end. The attacker writes the
checkpoint location (the default prefix is predictable) but has no key.
"""

from __future__ import annotations

import hashlib
import json
import os
import pickle
from datetime import datetime, timezone
from pathlib import Path

import pytest

from trcomp.contract.config import TrainingCompilerConfig
from trcomp.contract.errors import SharedCacheError
from trcomp_container import training
from trcomp_container.backends import inductor, xla
from trcomp_container.backends import jax as jax_engine
from trcomp_container.caching import job_setup, lineage, signing
from trcomp_container.caching.lineage import MANIFEST_NAME
from trcomp_container.caching.lineage_signed import SignedLineage
from trcomp_container.devices import Devices
from trcomp_container.environment import CACHE_LOCATION_ENV, build_environment
from trcomp_container.job import Job, JobPaths

KEY = "team-a-key-0123456789abcdef"
OLD_KEY = "team-a-old-key-fedcba9876543210"
KEYED = {"TRCOMP_SHARED_CACHE_KEY": KEY}
GRAPH = "inductor/fxgraph/ab/fabcdef/0"  # where inductor keeps a pickled FX graph
PLANTED = "inductor/fxgraph/ab/fabcdef/-planted"  # read first: inductor loads them sorted
KERNEL = "triton/K1/kernel.cubin"


class _Payload:
    """What an attacker plants: unpickling it runs a command (here, touches a marker)."""

    def __init__(self, marker: Path) -> None:
        self.marker = marker

    def __reduce__(self) -> tuple[object, tuple[str]]:
        return os.system, (f"touch {self.marker}",)


def _write(path: Path, body: bytes) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(body)
    return path


def _lineage(environ: dict[str, str] = KEYED) -> SignedLineage:
    signed = job_setup.signed_lineage(environ, None, timeout_s=5)
    assert signed is not None
    return signed


def _keyed_job_compiles(tmp_path: Path, environ: dict[str, str] = KEYED) -> Path:
    """A first keyed job of the lineage: compiles two files and persists them, signed."""
    persistent, live = tmp_path / "checkpoints" / "trcomp-cache", tmp_path / "first-live"
    signed = _lineage(environ)
    assert job_setup.restore_lineage(persistent, live, None, signed) == 0
    _write(live / GRAPH, b"the job's own graph")
    _write(live / KERNEL, b"the job's own kernel")
    _write(live / "inductor/locks/x.lock", b"")
    assert signed.persist(live, persistent) == 2
    assert signed.facts["files_signed"] == 2
    return persistent


def _restore(
    tmp_path: Path, persistent: Path, name: str, environ=KEYED
) -> tuple[Path, SignedLineage]:
    live = tmp_path / name
    signed = _lineage(environ)
    job_setup.restore_lineage(persistent, live, None, signed)
    return live, signed


def _files(live: Path) -> set[str]:
    return {p.relative_to(live).as_posix() for p in live.rglob("*") if p.is_file()}


def test_a_keyed_jobs_own_files_are_restored_by_the_next_keyed_job(tmp_path):
    persistent = _keyed_job_compiles(tmp_path)
    live, signed = _restore(tmp_path, persistent, "second-live")
    assert _files(live) == {GRAPH, KERNEL}
    assert (live / GRAPH).read_bytes() == b"the job's own graph"
    assert signed.facts["manifest"] == "verified"
    assert (signed.facts["files_restored"], signed.facts["files_refused"]) == (2, 0)
    assert not signed.warnings
    # Unchanged, already in the checkpoint location: listed again, not copied again.
    _write(live / "inductor/fxgraph/cd/fnew/0", b"compiled by the second job")
    assert signed.persist(live, persistent) == 1
    assert signed.facts["files_signed"] == 3
    third, again = _restore(tmp_path, persistent, "third-live")
    assert again.facts["files_restored"] == 3 and _files(third) == _files(live)


def test_a_pickle_planted_in_a_keyed_jobs_checkpoint_location_is_not_restored(tmp_path):
    persistent = _keyed_job_compiles(tmp_path)
    marker = tmp_path / "the-planted-pickle-ran"
    _write(persistent / PLANTED, pickle.dumps(_Payload(marker)))
    _write(persistent / "inductor/aotautograd/ab/planted", pickle.dumps(_Payload(marker)))

    live, signed = _restore(tmp_path, persistent, "victim-live")
    assert _files(live) == {GRAPH, KERNEL}  # the job's own files still start it warm
    assert signed.facts["files_refused"] == 2
    assert f"{PLANTED} (not in a signed manifest)" in signed.facts["refused"]
    (warning,) = signed.warnings
    assert PLANTED in warning and "inductor/aotautograd/ab/planted" in warning
    assert "delete them from the checkpoint location" in warning
    assert not marker.exists()
    # The victim's own persist does not sign the planted files into its manifest.
    signed.persist(live, persistent)
    _, next_job = _restore(tmp_path, persistent, "next-live")
    assert next_job.facts["files_refused"] == 2 and next_job.facts["files_restored"] == 2


def test_the_planted_pickle_would_run_if_restored(tmp_path):
    """The payload the tests plant is a real one: unpickled, it runs its command."""
    marker = tmp_path / "ran"
    pickle.loads(pickle.dumps(_Payload(marker)))
    assert marker.exists()


@pytest.mark.parametrize("same_size", [True, False])
def test_a_file_changed_after_the_signed_persist_is_not_restored(tmp_path, same_size):
    persistent = _keyed_job_compiles(tmp_path)
    body = b"the job's own graph" if same_size else b"a longer graph, rewritten"
    swapped = b"X" + body[1:] if same_size else body
    (persistent / GRAPH).write_bytes(swapped)
    live, signed = _restore(tmp_path, persistent, "victim-live")
    assert _files(live) == {KERNEL}
    reason = "other bytes" if same_size else "another size"
    assert signed.facts["refused"] == [f"{GRAPH} (changed since a keyed job signed it ({reason}))"]
    assert not [p for p in live.rglob("*") if p.name.endswith(".tmp")]


def test_a_listed_file_swapped_for_a_link_is_not_restored(tmp_path):
    persistent = _keyed_job_compiles(tmp_path)
    outside = _write(tmp_path / "elsewhere" / "graph", b"the job's own graph")  # same bytes
    (persistent / GRAPH).unlink()
    (persistent / GRAPH).symlink_to(outside)
    (persistent / "triton/dir-link").symlink_to(outside.parent, target_is_directory=True)
    live, signed = _restore(tmp_path, persistent, "victim-live")
    assert _files(live) == {KERNEL}
    assert signed.facts["refused"] == [f"{GRAPH} (a link)", "triton/dir-link (a link)"]


def test_a_manifest_rewritten_without_the_key_restores_nothing(tmp_path):
    persistent = _keyed_job_compiles(tmp_path)
    planted = _write(persistent / PLANTED, b"cos\nsystem\n(S'echo planted'\ntR.")
    document = json.loads((persistent / MANIFEST_NAME).read_text())
    manifest = json.loads(document["manifest"])
    digest = hashlib.sha256(planted.read_bytes()).hexdigest()
    manifest["files"][PLANTED] = [planted.stat().st_size, digest]
    document["manifest"] = json.dumps(manifest, sort_keys=True)  # the old signature kept
    (persistent / MANIFEST_NAME).write_text(json.dumps(document))
    live, signed = _restore(tmp_path, persistent, "victim-live")
    assert _files(live) == set()
    assert signed.facts["manifest"] == "refused: its signature is not this job's key's"
    assert signed.facts["files_refused"] == 3
    assert (
        f"{PLANTED} (manifest refused: its signature is not this job's key's)"
        in (signed.facts["refused"])
    )


def test_a_manifest_signed_with_another_purpose_does_not_verify(tmp_path):
    """The same key signs entries and Redis values: a manifest's MAC is kept apart."""
    persistent = _keyed_job_compiles(tmp_path)
    document = json.loads((persistent / MANIFEST_NAME).read_text())
    body, when = document["manifest"].encode(), document["written"]
    keys = signing.Keys((KEY.encode(),))
    mac = bytes.fromhex(document["mac"])
    assert signing.check(keys, signing.LINEAGE_MANIFEST, when, mac, body) == "ok"
    for other in (signing.ENTRY, signing.REDIS_VALUE):
        assert signing.check(keys, other, when, mac, body) == "bad"
    # Signed as an entry (the same key, the same bytes): refused as a manifest.
    document["mac"] = signing.sign(KEY.encode(), signing.ENTRY, when, body).hex()
    (persistent / MANIFEST_NAME).write_text(json.dumps(document))
    live, signed = _restore(tmp_path, persistent, "victim-live")
    assert _files(live) == set()
    assert signed.facts["manifest"] == "refused: its signature is not this job's key's"


def test_a_manifest_signed_before_the_teams_not_before_is_withdrawn(tmp_path):
    """A kept copy of an older signed lineage, put back after the team withdrew it."""
    persistent = _keyed_job_compiles(tmp_path)
    written = json.loads((persistent / MANIFEST_NAME).read_text())["written"]
    later = datetime.fromtimestamp(written + 2, tz=timezone.utc).isoformat()
    withdrawn = {**KEYED, "TRCOMP_SHARED_CACHE_NOT_BEFORE": later}
    live, signed = _restore(tmp_path, persistent, "after-withdrawal", withdrawn)
    assert _files(live) == set()
    assert signed.facts["manifest"] == "refused: withdrawn (signed before the team's not_before)"
    assert signed.facts["files_refused"] == 2
    # Before the moment: read as usual.
    earlier = datetime.fromtimestamp(written - 2, tz=timezone.utc).isoformat()
    live, signed = _restore(
        tmp_path, persistent, "before", {**KEYED, "TRCOMP_SHARED_CACHE_NOT_BEFORE": earlier}
    )
    assert _files(live) == {GRAPH, KERNEL} and signed.facts["manifest"] == "verified"


def test_no_manifest_restores_nothing_and_names_every_file(tmp_path):
    """A lineage written by keyless jobs (or an older trcomp): compiled again, named."""
    persistent = tmp_path / "checkpoints" / "trcomp-cache"
    for index in range(8):
        _write(persistent / f"inductor/fxgraph/a{index}/f/0", b"unsigned")
    live, signed = _restore(tmp_path, persistent, "live")
    assert _files(live) == set() and signed.facts["manifest"] == "missing"
    assert signed.facts["files_refused"] == 8 and len(signed.facts["refused"]) == 8
    (warning,) = signed.warnings
    assert warning.startswith("8 file(s)") and "; and 3 more." in warning


def test_while_keys_rotate_a_manifest_of_the_previous_key_restores(tmp_path):
    persistent = _keyed_job_compiles(tmp_path, {"TRCOMP_SHARED_CACHE_KEY": OLD_KEY})
    rotating = {**KEYED, "TRCOMP_SHARED_CACHE_KEY_PREVIOUS": OLD_KEY}
    live, signed = _restore(tmp_path, persistent, "rotating", rotating)
    assert _files(live) == {GRAPH, KERNEL}
    signed.persist(live, persistent)  # signed with the new key now
    _, new_only = _restore(tmp_path, persistent, "new-only")
    assert new_only.facts["files_restored"] == 2


def test_a_keyless_job_still_trusts_its_checkpoint_location(tmp_path):
    persistent = _keyed_job_compiles(tmp_path)
    _write(persistent / PLANTED, b"planted")
    assert job_setup.signed_lineage({}, None, timeout_s=5) is None
    live = tmp_path / "keyless-live"
    assert job_setup.restore_lineage(persistent, live, None, None) == 3
    assert _files(live) == {GRAPH, KERNEL, PLANTED}  # the manifest is never copied in
    assert lineage.persist(live, persistent) == 0


def test_a_keyed_job_that_cannot_read_its_key_fails_instead_of_trusting_the_lineage():
    with pytest.raises(SharedCacheError, match="is 5 bytes"):
        job_setup.signed_lineage({"TRCOMP_SHARED_CACHE_KEY": "short"}, None, timeout_s=5)


def test_every_cache_dir_the_compilers_load_from_is_withheld_in_a_keyed_job(tmp_path):
    """The names the entrypoint withholds are every directory a backend points a compiler
    at: one added to a backend and forgotten here fails this test."""
    dirs = {
        name
        for found in (
            inductor.cache_environment(tmp_path),
            xla.cache_environment(tmp_path),
            jax_engine.cache_environment(tmp_path),
        )
        for name, value in found.items()
        if value.startswith(str(tmp_path)) or value.startswith(os.path.realpath(tmp_path))
    }
    assert dirs == set(CACHE_LOCATION_ENV)


def _environment(tmp_path: Path, environ: dict[str, str], backend: str = "inductor"):
    """The training processes' environment, as the entrypoint builds it; and its warnings."""
    config = TrainingCompilerConfig(
        backend=backend, **({"xla_engine": "jax"} if backend == "xla" else {})
    )
    job = Job(
        paths=JobPaths.under(tmp_path / "ml"), framework_params={}, user_args=[], toolkit_env={},
        entry_point="train.py", module_dir="", hosts=["algo-1"], current_host="algo-1",
        num_gpus=0, num_cpus=2, environ=environ, instance_type="local_process",
    )  # fmt: skip
    report = training._Report(keyed=job_setup.is_keyed(environ))
    base = training._training_base(config, job, report)
    env = build_environment(
        config=config, backend=backend, engine="jax" if backend == "xla" else None,
        devices=Devices(), paths=job.paths, base_env=base, metrics_dir=tmp_path / "m",
        scratch_dir=tmp_path / "scratch", cache_dir=tmp_path / "live", keyed=report.keyed,
    )  # fmt: skip
    return env, report.warnings


def test_a_keyed_job_withholds_the_cache_dirs_its_environment_names(tmp_path):
    """A cache dir someone else fills (a shared /tmp folder, another job's) would reach the
    compilers unchecked: a keyed job's compilers load from the live cache only."""
    inherited = {"TORCHINDUCTOR_CACHE_DIR": "/tmp/team-inductor", "TRITON_CACHE_DIR": "/tmp/t"}
    env, warnings = _environment(tmp_path, {**KEYED, **inherited})
    assert env["TORCHINDUCTOR_CACHE_DIR"] == str(tmp_path / "live" / "inductor")
    assert env["TRITON_CACHE_DIR"] == str(tmp_path / "live" / "triton")
    (warning,) = warnings
    assert "TORCHINDUCTOR_CACHE_DIR, TRITON_CACHE_DIR" in warning and KEY not in warning
    keyless, _ = _environment(tmp_path, inherited)  # a keyless job: the user's value wins
    assert keyless["TORCHINDUCTOR_CACHE_DIR"] == "/tmp/team-inductor"


def test_a_keyed_jax_job_keeps_its_cache_in_the_live_dir(tmp_path):
    """Keyless, JAX writes and reads the checkpoint location itself; keyed, its cache goes
    through the signed lineage like the rest."""
    env, _ = _environment(tmp_path, {**KEYED, "JAX_COMPILATION_CACHE_DIR": "/tmp/j"}, "xla")
    assert env["JAX_COMPILATION_CACHE_DIR"] == os.path.realpath(tmp_path / "live" / "jax")
    assert env["JAX_PERSISTENT_CACHE_ENABLE_XLA_CACHES"] == "none"
    keyless, _ = _environment(tmp_path, {}, "xla")
    checkpoint = tmp_path / "ml" / "checkpoints" / "trcomp-cache" / "jax"
    assert keyless["JAX_COMPILATION_CACHE_DIR"] == os.path.realpath(checkpoint)
    assert "JAX_PERSISTENT_CACHE_ENABLE_XLA_CACHES" not in keyless
    persistent = tmp_path / "ml" / "checkpoints" / "trcomp-cache"
    _write(persistent / "jax" / "planted-program", b"an executable")
    live, signed = _restore(tmp_path, persistent, "jax-live")
    assert _files(live) == set() and signed.facts["files_refused"] == 1


@pytest.mark.parametrize(
    "document",
    [
        "[" * 100_000,  # nested past the parser's recursion limit
        '{"manifest": "{}", "written": Infinity, "mac": "00"}',
        '{"manifest": "{}", "written": 1e400, "mac": "00"}',
    ],
    ids=["nested", "infinity", "overflow"],
)
def test_a_manifest_planted_to_crash_the_restore_restores_nothing(tmp_path, document):
    """Whoever writes the checkpoint location wrote a manifest that is no JSON a job can
    read: the keyed job raised out of the restore (RecursionError, OverflowError) and every
    keyed job of the lineage failed as a trcomp internal error, before the key was checked."""
    persistent = _keyed_job_compiles(tmp_path)
    (persistent / MANIFEST_NAME).write_text(document)
    live, signed = _restore(tmp_path, persistent, "victim-live")
    assert _files(live) == set()
    assert signed.facts["manifest"] == "refused: not a signed manifest"
    assert signed.facts["files_refused"] == 2


def test_a_manifest_signed_a_year_ahead_is_refused(tmp_path):
    """A key holder's copy dated ahead would outlive every later withdrawal."""
    persistent = _keyed_job_compiles(tmp_path)
    document = json.loads((persistent / MANIFEST_NAME).read_text())
    manifest = json.loads(document["manifest"])
    ahead = manifest["written"] + 365 * 86400
    manifest["written"] = ahead
    body = json.dumps(manifest, sort_keys=True)
    mac = signing.sign(KEY.encode(), signing.LINEAGE_MANIFEST, ahead, body.encode())
    document.update(manifest=body, written=ahead, mac=mac.hex())
    (persistent / MANIFEST_NAME).write_text(json.dumps(document))
    live, signed = _restore(tmp_path, persistent, "ahead")
    assert _files(live) == set()
    assert signed.facts["manifest"] == "refused: signed at a time ahead of this machine's clock"


def test_a_planted_name_with_a_newline_adds_no_line_to_the_log(tmp_path):
    persistent = _keyed_job_compiles(tmp_path)
    _write(persistent / "inductor" / "x\nERROR: forged log line", b"planted")
    _, signed = _restore(tmp_path, persistent, "victim-live")
    (warning,) = signed.warnings
    assert "\n" not in warning and "x\\nERROR: forged log line" in warning
    assert all("\n" not in shown for shown in signed.facts["refused"])
