"""What the training processes hold of the job's environment, with real jobs.

The entrypoint runs with the team's key (and the Redis password) in its environment;
the user's script, a planted pickle inside it and every child it starts must not see
them where only the entrypoint signs (``file://``, S3), and in a Redis job only the
start-up hook holds them, in memory. Before, the training processes got a copy of the
entrypoint's environment: the key was in every one, and torch's remote-cache variables
let a ``python -I`` child (no hook) read unsigned values from Redis.
"""

from __future__ import annotations

import json

import pytest

from tests.helpers import jobs
from tests.helpers.redis_server import redis_server
from trcomp.config import TrainingCompilerConfig
from trcomp.contract.env import (
    KEY_ENV,
    PREFIX,
    REDIS_URL_ENV,
    REGISTRY,
    SECRET_NAMES,
    TORCH_REMOTE_CACHE_ENV,
)

pytestmark = [pytest.mark.slow]

KEY = "team-key-of-the-env-tests-7c1d9e"
PLANTED = "pt2:trcomp-attack-value"


def _attack_job(tmp_path, uri: str, **env: str) -> dict:
    config = TrainingCompilerConfig(backend="inductor", shared_cache=uri, shared_cache_timeout_s=60)
    run = jobs.run_job(
        tmp_path / "job",
        config=config,
        entry_point="env_attack.py",
        hyperparameters={"planted": PLANTED},
        env={"TRAINING_JOB_NAME": "env-attack", KEY_ENV: KEY, **env},
    )
    assert run.returncode == 0, run.output[-4000:]
    assert KEY not in run.output
    seen: dict = json.loads((tmp_path / "job" / "model" / "env_attack.json").read_text())
    return seen


def _trcomp_names(environ: dict[str, str]) -> set[str]:
    return {name for name in environ if name.startswith(PREFIX)}


def test_a_keyed_file_job_gives_its_script_and_children_no_key(tmp_path):
    """file://: only the entrypoint signs and checks, so no training process holds the key;
    the platform's variables (SM_*, the user's own, PATH) still reach the script."""
    seen = _attack_job(
        tmp_path,
        f"file://{tmp_path / 'shared'}",
        MY_TEAM_SETTING="kept",
        TRCOMP_SHARED_CACHE_KEY_="a near name",  # a typo of the key's name: dropped too
    )
    for where in ("environ", "hooked_child"):
        environ = seen[where]
        assert KEY not in json.dumps(environ), where  # was in every one of them
        assert not _trcomp_names(environ) & SECRET_NAMES, where
        assert environ["MY_TEAM_SETTING"] == "kept" and environ["SM_MODEL_DIR"], where
        assert environ["PATH"] and "SM_HPS" in environ, where
        allowed = {v.name for v in REGISTRY if v.handoff in ("pass", "set")}
        assert _trcomp_names(environ) <= allowed, _trcomp_names(environ) - allowed
    assert KEY not in json.dumps(seen["isolated_child"]["environ"])
    # The entrypoint's own environment holds the key: the script read it there before.
    assert seen["ancestors"] and KEY not in json.dumps(seen["ancestors"])
    summary = json.loads((tmp_path / "job/output/data/compiler/summary.json").read_text())
    assert any("TRCOMP_SHARED_CACHE_KEY_" in w for w in summary["warnings"])
    assert summary["shared_cache"]["signed"] is True  # the entrypoint still signs


def test_a_process_without_the_hook_in_a_keyed_redis_job_reads_nothing_unsigned(tmp_path):
    """A Redis without a password, a value planted unsigned under a name inductor looks up:
    a ``python -I`` child of the script (no hook) has no remote cache at all, and neither
    the script after the hook started nor its children hold the key. Before, the child
    read the planted bytes through torch's own Redis backend."""
    import redis

    with redis_server(tmp_path) as server:
        client = redis.Redis.from_url(server.url)
        client.set(PLANTED, b"attacker's graph")
        try:
            seen = _attack_job(tmp_path, server.url, TORCHINDUCTOR_FX_GRAPH_REMOTE_CACHE="1")
        finally:
            client.close()
    isolated = seen["isolated_child"]
    assert isolated["remote_fx_graph_cache"] is False  # was True
    assert isolated["value"] is None  # was "attacker's graph"
    for where in ("environ", "hooked_child"):
        environ = seen[where]
        assert KEY not in json.dumps(environ), where  # the hook took it out at start-up
        assert REDIS_URL_ENV not in environ, where
        assert not set(TORCH_REMOTE_CACHE_ENV) & set(environ), where
    assert not set(TORCH_REMOTE_CACHE_ENV) & set(isolated["environ"])
    # What a child of the script reads in /proc/<script>/environ, and the script in its
    # parent's: the key was in both before.
    assert KEY not in seen["own_block"] and KEY not in json.dumps(seen["ancestors"])
