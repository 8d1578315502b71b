"""The Redis handoff: written by the entrypoint, taken out of the environment by the hook."""

from __future__ import annotations

from trcomp.contract.env import KEY_ENV, LAUNCHER_ENV, REDIS_PASSWORD_ENV, REDIS_URL_ENV
from trcomp_container.inprocess.redis_handoff import TORCHRUN, RedisHandoff

HANDOFF = RedisHandoff("redis://h:1/0", ("fx_graph",), "pw", (b"k" * 16, b"p" * 16))


def test_the_handoff_round_trips_and_its_secrets_stay_out_of_its_repr():
    assert RedisHandoff.from_env(HANDOFF.to_env()) == HANDOFF
    assert "pw" not in repr(HANDOFF) and "kkkk" not in repr(HANDOFF)
    assert RedisHandoff.from_env({}) is None


def test_a_process_takes_the_handoff_out_of_its_environment():
    environ = {**HANDOFF.to_env(), "PATH": "/bin", LAUNCHER_ENV: "direct"}
    assert RedisHandoff.take(environ) == HANDOFF
    assert environ == {"PATH": "/bin", LAUNCHER_ENV: "direct"}


def test_torchruns_agent_leaves_it_for_its_workers_which_take_it():
    agent = {**HANDOFF.to_env(), LAUNCHER_ENV: TORCHRUN}
    assert RedisHandoff.take(agent) is None
    assert agent[KEY_ENV] and agent[REDIS_PASSWORD_ENV] and agent[REDIS_URL_ENV]
    worker = {**agent, "LOCAL_RANK": "1"}
    assert RedisHandoff.take(worker) == HANDOFF
    assert KEY_ENV not in worker and REDIS_PASSWORD_ENV not in worker
