"""One measurement, in its own process: ``python -m trcomp_bench.worker SPEC OUT``.

A fresh process per measurement is what makes "cold" and "warm" real: nothing
compiled survives in memory, only what the compile cache wrote to disk. The
parent (:mod:`trcomp_bench.harness`) writes a :class:`RunSpec` to ``SPEC`` and
reads the result back from ``OUT`` (stdout is left to libraries' chatter).
"""

from __future__ import annotations

import json
import sys
import time
import traceback
from collections.abc import Mapping
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

__all__ = ["RunSpec", "main", "measure"]

_STARTED = time.perf_counter()


@dataclass(frozen=True)
class RunSpec:
    """What one measurement subprocess trains, and how long."""

    backend: str
    batch_size: int
    workload: str = "mlp"
    model: str | None = None  # a user's module:factory; replaces ``workload``
    size: str = "small"
    steps: int = 30
    warmup: int = 5
    lr: float = 1e-3
    seed: int = 0
    device: str = "auto"
    # The zero-code path: the worker leaves the model as it is and the start-up hook
    # (run with the container's environment) compiles it during the first step.
    zero_code: bool = False

    def to_json(self) -> str:
        """This spec as JSON (the file the parent hands to the worker)."""
        return json.dumps(asdict(self), sort_keys=True)

    @classmethod
    def from_json(cls, text: str) -> RunSpec:
        """The spec :meth:`to_json` wrote."""
        return cls(**json.loads(text))


def measure(spec: RunSpec) -> dict[str, Any]:
    """Train ``spec.steps`` steps and time them.

    Returns ``device``, ``losses`` (one per step), ``first_step_s`` (from the
    compile call to the end of the first optimizer step, so compilation is in
    it; imports and model building are not), ``step_times_s`` (the steps after
    ``warmup``), ``peak_mem_mb``, ``startup_s`` (process start to the
    compile call: imports, model build) and, on inductor, ``fxgraph_cache``
    (its FX graph cache's ``hit`` and ``miss`` counts in this process).
    """
    from trcomp_bench.backends import open_session
    from trcomp_bench.workloads import get_workload, load_factory, loss_of

    session = open_session(spec.backend, spec.device)
    import torch
    import torch._dynamo  # optimizers import it on their first step: keep that off the clock

    torch.manual_seed(spec.seed)
    if spec.model:
        factory = load_factory(spec.model)
    else:
        factory = get_workload(spec.workload).factory(spec.size)
    model, batch_fn = factory(spec.batch_size)
    model.train()
    batches = [batch_fn(step) for step in range(spec.steps)]  # data made before the clock starts

    start = time.perf_counter()
    compiled = model.to(session.device) if spec.zero_code else session.compile(model)
    optimizer = session.optimizer(model.parameters(), spec.lr)
    losses: list[float] = []
    times: list[float] = []
    last = start

    def train_step(inputs: Any) -> Any:
        output = compiled(**inputs) if isinstance(inputs, Mapping) else compiled(*inputs)
        loss = loss_of(output)
        loss.backward()
        session.optimizer_step(optimizer)
        optimizer.zero_grad(set_to_none=True)
        return loss

    step = session.compile_step(train_step)
    for batch in batches:
        loss = step(session.to_device(batch))
        session.mark_step()
        losses.append(float(loss.item()))  # waits for the step, so the clock is honest
        now = time.perf_counter()
        times.append(now - last)
        last = now
    result: dict[str, Any] = {
        "device": session.device_label,
        "losses": losses,
        "first_step_s": times[0],
        "step_times_s": times[spec.warmup :] if len(times) > spec.warmup else times[1:],
        "peak_mem_mb": session.peak_mem_mb(),
        "startup_s": start - _STARTED,
        "torch": torch.__version__,
    }
    if spec.zero_code and len(times) > 1:
        result["first_compiled_step_s"] = times[1]
    if session.spec.compiler == "inductor":
        from torch._dynamo.utils import counters

        found = counters["inductor"]
        result["fxgraph_cache"] = {
            "hit": int(found["fxgraph_cache_hit"]),
            "miss": int(found["fxgraph_cache_miss"]),
        }
    return result


def _is_oom(exc: BaseException) -> bool:
    return type(exc).__name__ == "OutOfMemoryError" or "out of memory" in str(exc).lower()


def main(argv: list[str] | None = None) -> int:
    """Run the spec in ``argv[0]`` and write the result JSON to ``argv[1]``."""
    args = sys.argv[1:] if argv is None else argv
    if len(args) != 2:
        print("usage: python -m trcomp_bench.worker SPEC.json OUT.json", file=sys.stderr)
        return 2
    spec = RunSpec.from_json(Path(args[0]).read_text())
    try:
        result: dict[str, Any] = measure(spec)
        code = 0
    except Exception as exc:  # any failure becomes a row error the parent reports
        tail = "".join(traceback.format_exception(exc)[-3:]).strip()
        result = {"error": f"{type(exc).__name__}: {exc}", "traceback": tail, "oom": _is_oom(exc)}
        code = 1
    Path(args[1]).write_text(json.dumps(result))
    return code


if __name__ == "__main__":
    raise SystemExit(main())
