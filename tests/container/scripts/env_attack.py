"""What code running in a training process (a planted pickle, say) can reach, and what its
children get: written to ``<model dir>/env_attack.json``.

- ``environ``: this process's environment, as the script sees it (the hook has started);
- ``hooked_child``: the environment of a plain ``python`` child (the hook runs there too);
- ``ancestors``: the environment of each process above this one that it can read
  (``/proc/<pid>/environ``: the entrypoint's, which holds the key, is one of them unless
  the entrypoint made itself unreadable);
- ``own_block``: this process's environment as it was started, as its children read it
  (``/proc/self/environ``: the hook takes the Redis handoff out of ``os.environ``, not
  out of there, unless it blanks it);
- ``isolated_child``: a ``python -I`` child (no hook): whether inductor's remote FX-graph
  cache is on there, and if so what its Redis backend returns for ``--planted`` (the name
  an attacker wrote an unsigned value under), as inductor would look it up.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
from pathlib import Path

ISOLATED = """
import json, os, sys
from torch._inductor.utils import should_use_remote_fx_graph_cache
on = should_use_remote_fx_graph_cache()
value = None
if on:
    from torch._inductor.remote_cache import RedisRemoteCacheBackend
    got = RedisRemoteCacheBackend("trcomp-attack").get(sys.argv[1])
    value = got.decode("latin-1") if got is not None else None
print(json.dumps({"remote_fx_graph_cache": on, "value": value, "environ": dict(os.environ)}))
"""
DUMP = "import json, os; print(json.dumps(dict(os.environ)))"

parser = argparse.ArgumentParser()
parser.add_argument("--planted", default="pt2:trcomp-attack")
args, _ = parser.parse_known_args()


def _last_json(argv: list[str]) -> dict:
    done = subprocess.run(argv, capture_output=True, text=True, check=True)
    return json.loads(done.stdout.strip().splitlines()[-1])


def _ancestors() -> dict[str, str]:
    """``/proc/<pid>/environ`` of every process above this one, as far as it can be read."""
    found: dict[str, str] = {}
    pid = os.getppid()
    while pid > 1:
        try:
            found[str(pid)] = Path(f"/proc/{pid}/environ").read_bytes().decode("latin-1")
        except OSError as exc:
            found[str(pid)] = f"unreadable: {exc.strerror}"
        status = Path(f"/proc/{pid}/status").read_text()
        pid = int(next(line.split()[1] for line in status.splitlines() if line.startswith("PPid:")))
    return found


seen = {
    "environ": dict(os.environ),
    "ancestors": _ancestors(),
    "own_block": Path("/proc/self/environ").read_bytes().decode("latin-1"),
    "hooked_child": _last_json([sys.executable, "-c", DUMP]),
    "isolated_child": _last_json([sys.executable, "-I", "-c", ISOLATED, args.planted]),
}
model_dir = Path(os.environ["SM_MODEL_DIR"])
model_dir.mkdir(parents=True, exist_ok=True)
(model_dir / "env_attack.json").write_text(json.dumps(seen))
print("env_attack done")
