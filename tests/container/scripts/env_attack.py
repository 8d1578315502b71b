"""What code running in a training process (a planted pickle, say) can reach, and what its
children get: written to ``<model dir>/env_attack.json``.

- ``environ``: this process's environment, as the script sees it (the hook has started);
- ``hooked_child``: the environment of a plain ``python`` child (the hook runs there too);
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


seen = {
    "environ": dict(os.environ),
    "hooked_child": _last_json([sys.executable, "-c", DUMP]),
    "isolated_child": _last_json([sys.executable, "-I", "-c", ISOLATED, args.planted]),
}
model_dir = Path(os.environ["SM_MODEL_DIR"])
model_dir.mkdir(parents=True, exist_ok=True)
(model_dir / "env_attack.json").write_text(json.dumps(seen))
print("env_attack done")
