"""What the hook changes in the user's process is undone at the session's close.

The ledger on its own, then a real job's process: a script that compiles its
model itself, under the inductor backend with an inductor option, runs the
speed-up window (the compiler stance switches) and the zero-code hooks; after
the session's close, torch's configs, loggers' filters, warning filters,
patched functions, global hooks and the compiler stance equal those of the same
script run without the hook, and the ledger lists only what stays by design.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from tests.helpers import forkserver
from tests.helpers.hook import run_hooked
from trcomp.contract.runtime_config import RuntimeConfig
from trcomp_container.inprocess.ledger import Ledger


def test_the_ledger_undoes_newest_first_and_keeps_what_stays():
    done: list[str] = []
    ledger = Ledger()
    ledger.record("a", lambda: done.append("a"))
    ledger.keep("exit hook", "runs at exit")
    ledger.record("b", lambda: done.append("b"))
    ledger.record("broken", lambda: 1 / 0)
    assert ledger.undo("a") and done == ["a"] and not ledger.undo("a")
    stays = ledger.close()
    assert done == ["a", "b"]
    assert [change.name for change in stays] == ["exit hook"]
    assert ledger.undo_errors and "broken" in ledger.undo_errors[0]


SCRIPT = r"""
import json, logging, sys, warnings

import torch
import torch._dynamo.config as dynamo_config
import torch._dynamo.eval_frame as eval_frame
import torch._inductor.codecache as codecache
import torch._inductor.config as inductor_config
import torch._inductor.remote_cache as remote_cache
import torch.nn.modules.module as module_hooks
import torch.optim.optimizer as optimizer_hooks
from torch._dynamo.callback import callback_handler

torch.manual_seed(0)
net = torch.nn.Sequential(torch.nn.Linear(4, 8), torch.nn.Tanh(), torch.nn.Linear(8, 1))
model = torch.compile(net)
opt = torch.optim.SGD(model.parameters(), lr=0.01)
for step in range(16):
    loss = model(torch.randn(8, 4)).pow(2).mean()
    opt.zero_grad()
    loss.backward()
    opt.step()

stays = None
if "--hooked" in sys.argv:
    from trcomp_container.inprocess import session

    current = session.current()
    current.close()
    stays = [change.name for change in current.stays]


def names(items):
    return sorted(getattr(item, "__qualname__", type(item).__qualname__) for item in items)


def canon(value):
    # Sets print in hash order, functions with their address: neither is a difference.
    if isinstance(value, (set, frozenset)):
        return repr(sorted(canon(item) for item in value))
    if callable(value):
        return getattr(value, "__qualname__", type(value).__qualname__)
    return repr(value)


state = {
    "dynamo_config": {k: canon(v) for k, v in dynamo_config.get_config_copy().items()},
    "inductor_config": {k: canon(v) for k, v in inductor_config.get_config_copy().items()},
    "warning_filters": [repr(entry) for entry in warnings.filters],
    "log_filters": {
        name: names(logger.filters)
        for name, logger in logging.root.manager.loggerDict.items()
        if isinstance(logger, logging.Logger) and logger.filters
    },
    "meta_path": names(sys.meta_path),
    "excepthook": getattr(sys.excepthook, "__qualname__", "?"),
    "compile_callbacks": [
        len(callback_handler.start_callbacks), len(callback_handler.end_callbacks)
    ],
    "reorderable": names(dynamo_config.reorderable_logging_functions),
    "redis_backend": [
        getattr(remote_cache.RedisRemoteCacheBackend, name).__qualname__
        for name in ("_get", "_put")
    ],
    "header_dir": str(codecache._HEADER_DIR),
    "stance": repr(eval_frame._stance),
    "module_hooks": [
        len(module_hooks._global_forward_pre_hooks), len(module_hooks._global_forward_hooks)
    ],
    "optimizer_hooks": len(optimizer_hooks._global_optimizer_post_hooks),
}
print("STATE" + json.dumps({"state": state, "stays": stays}))
"""


def _state(output: str) -> dict:
    (line,) = [line for line in output.splitlines() if line.startswith("STATE")]
    return json.loads(line.removeprefix("STATE"))


@pytest.mark.slow
def test_after_close_the_process_is_as_if_the_hook_never_ran(tmp_path: Path):
    config = RuntimeConfig(
        enabled=True,
        backend="inductor",
        engine="inductor",
        keep_faster=True,
        inductor_options={"fallback_random": True},
    )
    env = {**config.to_env(), "TORCHINDUCTOR_CACHE_DIR": str(tmp_path / "inductor")}
    hooked = run_hooked(
        tmp_path, SCRIPT.replace("sys.argv", "['--hooked']"), extra_env=env, fork=True
    )
    assert hooked.returncode == 0, hooked.stderr[-3000:]
    plain_env = {k: v for k, v in os.environ.items() if not k.startswith("TRCOMP_")}
    plain_env["TORCHINDUCTOR_CACHE_DIR"] = str(tmp_path / "inductor")
    plain = forkserver.run_python(["-c", SCRIPT], plain_env, capture_output=True, text=True)
    assert plain.returncode == 0, plain.stderr[-3000:]
    after, before = _state(hooked.stdout), _state(plain.stdout)
    assert after["stays"] == ["atexit: the record"]
    for part, value in before["state"].items():
        assert after["state"][part] == value, part
    # The job really did change them while it ran: the record shows the window ran.
    (record,) = (tmp_path / "ranks").glob("rank3-pid*.json")
    speedup = json.loads(record.read_text())["speedup"]
    assert speedup["eager_steps"], speedup
