"""Compile and step metrics, collected inside the user's training process.

The entrypoint puts this directory first on ``PYTHONPATH``, so Python imports
this module at start-up in every process of the job (torchrun workers too).
It does nothing unless ``TRCOMP_METRICS_DIR`` is set, imports nothing heavy,
and hooks in only when the script itself imports torch:

- a global optimizer step post-hook times the first and the steady steps, on
  the GPU's timeline when CUDA runs (``trcomp_stepclock``), and stays out of
  the graph when the user compiles ``optimizer.step`` (no graph break);
- dynamo's compile callbacks time every compilation and count recompiles;
- torch-xla's metrics give its compile count and time;
- an exception hook records an uncaught exception for the failure file;
- under inductor, the one switch (``trcomp_switch``): compile a plain loop's
  model (``trcomp_autocompile``) and measure eager against compiled steps,
  keeping the faster when asked (``trcomp_speedup``);
- on GPU hosts, torch-xla's device calls stop the script (``trcomp_xla_guard``);
- a Redis shared cache that stops answering turns inductor's remote cache off
  instead of failing the compile (``trcomp_redis_guard``).

At exit each process that stepped, compiled or failed writes
``<TRCOMP_METRICS_DIR>/rank<RANK>-pid<PID>.json``; the entrypoint aggregates
them into ``summary.json``. Then the next ``sitecustomize`` on the path (an
image's own) runs, as if this one were not there.
"""

from __future__ import annotations

import atexit
import contextlib
import importlib.abc
import importlib.machinery
import importlib.util
import json
import os
import re
import sys
import time
import traceback
from collections.abc import Callable, Sequence
from pathlib import Path
from types import ModuleType, TracebackType
from typing import Any

import trcomp_reports
from trcomp_stepclock import StepClock

__all__: list[str] = []

_START = time.time()
_MAX_INTERVALS = 10_000
_TRACEBACK_LINES = 30
_COMPILE_ID = re.compile(r"(\d+)/(\d+)")


class _State:
    """Everything this process measured; written once at exit."""

    def __init__(self) -> None:
        self.steps = 0
        self.first_step_s: float | None = None
        self.clock = StepClock(_MAX_INTERVALS)
        self.optimizer_id: int | None = None
        self.compile_s = 0.0
        self.compile_events = 0
        self.recompiles = 0
        self.compile_started: float | None = None
        self.xla_compiles_at_step3: int | None = None
        self.xla_compiles_at_last_step: int | None = None
        self.error: dict[str, Any] | None = None
        self.warnings: list[str] = []


_state = _State()
_switch: Any = None  # trcomp_switch.Switch once torch is imported in a compiled job
_EX_CONFIG = 64  # the entrypoint's exit code for a job it refuses (trcomp_container.failures)


def _xla_compile_count() -> int | None:
    if "torch_xla" not in sys.modules:
        return None
    import torch_xla.debug.metrics as met

    data = met.metric_data("CompileTime")
    return int(data[0]) if data else 0


def _on_optimizer_step(optimizer: Any, args: Any, kwargs: Any) -> None:
    # When the user compiles optimizer.step, dynamo traces this hook: it must only
    # call _record_step, which _after_dynamo makes a call dynamo moves after the graph.
    _record_step(id(optimizer))


def _record_step(optimizer_id: int) -> None:
    if _state.optimizer_id is None:
        _state.optimizer_id = optimizer_id
    elif optimizer_id != _state.optimizer_id:
        # Several optimizers (or a wrapper): count the first one's steps only; a script
        # that stops stepping it (a second phase) ends the measurement window.
        if _switch is not None:
            try:
                _switch.on_other_optimizer()
            except Exception as exc:
                _stop_measuring(exc)
        return
    _state.steps += 1
    if _state.first_step_s is None:
        _state.first_step_s = time.time() - _START
    _state.clock.mark()
    if _switch is not None:
        try:
            _switch.on_step(_state.steps, _state.compile_events, _state.clock)
        except Exception as exc:  # never break the user's script over the measurement
            _stop_measuring(exc)
    with contextlib.suppress(Exception):
        count = _xla_compile_count()
        if count is not None:
            if _state.steps == 3:
                _state.xla_compiles_at_step3 = count
            _state.xla_compiles_at_last_step = count


def _stop_measuring(exc: Exception) -> None:
    message = f"the eager/compiled measurement stopped: {type(exc).__name__}: {exc}"
    _warn(message)
    with contextlib.suppress(Exception):
        _switch.abandon(message)  # back to compiled, whatever the window was doing


def _on_compile_start(args: Any) -> None:
    _state.compile_started = time.perf_counter()
    if _switch is not None:
        try:
            _switch.before_compile()
        except Exception as exc:
            _warn(f"the zero-code hook stopped: {type(exc).__name__}: {exc}")


def _on_compile_end(args: Any) -> None:
    if _state.compile_started is not None:
        _state.compile_s += time.perf_counter() - _state.compile_started
        _state.compile_started = None
    _state.compile_events += 1
    match = _COMPILE_ID.search(str(getattr(args, "compile_id", "")))
    if match and int(match.group(2)) > 0:
        _state.recompiles += 1


def _warn(message: str) -> None:
    _state.warnings.append(message)
    print(f"[trcomp] WARNING: {message}", file=sys.stderr, flush=True)


def _runtime_config() -> Any:
    """The resolved config (``TRCOMP_CONFIG``), or None outside a job or when unreadable."""
    if not os.environ.get("TRCOMP_CONFIG"):
        return None
    from trcomp.contract.runtime_config import RuntimeConfig

    return RuntimeConfig.from_env()


def _after_torch(torch: ModuleType) -> None:
    global _switch
    from torch.optim.optimizer import register_optimizer_step_post_hook

    register_optimizer_step_post_hook(_on_optimizer_step)
    options = os.environ.get("TRCOMP_INDUCTOR_OPTIONS")
    if options:
        _apply_inductor_options(json.loads(options))
    config = _runtime_config()
    if config is not None and config.enabled:
        from trcomp_switch import Switch

        _switch = Switch(torch, config, os.environ)


def _apply_inductor_options(options: dict[str, Any]) -> None:
    # One by one: an option this torch refuses is reported, and the others still apply.
    import torch._inductor.config as inductor_config

    for key, value in options.items():
        try:
            inductor_config.patch({key: value}).__enter__()
        except Exception as exc:
            _warn(f"inductor option {key}={value!r} was not applied: {exc}")


def _after_codecache(codecache: ModuleType) -> None:
    # Inductor keeps precompiled headers under $TMPDIR/torchinductor_<user>, whatever
    # TORCHINDUCTOR_CACHE_DIR says: move them into the job's cache directory.
    cache_dir = os.environ.get("TORCHINDUCTOR_CACHE_DIR")
    if cache_dir and hasattr(codecache, "_HEADER_DIR"):
        headers = os.path.join(cache_dir, "precompiled_headers")
        setattr(codecache, "_HEADER_DIR", headers)  # noqa: B010
        setattr(codecache, "_HEADER_LOCK_DIR", os.path.join(headers, "locks"))  # noqa: B010


def _after_remote_cache(remote_cache: ModuleType) -> None:
    from trcomp_redis_guard import guard_redis_backend

    if os.environ.get("TORCHINDUCTOR_REDIS_URL") and not guard_redis_backend(remote_cache, _warn):
        _warn(
            "torch has no RedisRemoteCacheBackend._get/_put: a Redis that stops answering "
            "fails the compile"
        )


def _after_dynamo(dynamo: ModuleType) -> None:
    global _record_step
    import torch._dynamo.config as dynamo_config
    from torch._dynamo.callback import callback_handler

    # Not traced (disable), and called after the compiled graph instead of
    # breaking it (a reorderable logging function): a compiled optimizer.step
    # keeps its graphs, and the step is still counted and timed.
    _record_step = dynamo.disable(_record_step)
    dynamo_config.reorderable_logging_functions.add(_record_step)

    callback_handler.register_start_callback(_on_compile_start)
    callback_handler.register_end_callback(_on_compile_end)


def _after_torch_xla(torch_xla: ModuleType) -> None:
    # atexit runs last-registered first: move our dump ahead of torch-xla's runtime teardown.
    atexit.unregister(_dump)
    atexit.register(_dump)
    config = _runtime_config()
    if config is not None and config.device_kind == "gpu" and config.engine != "torch_xla":
        from trcomp_xla_guard import guard_device_calls, refusal

        reason = refusal(config.engine)

        def stop() -> None:
            _state.error = {"type": "TorchXlaOnGpu", "message": reason, "traceback_tail": ""}
            print(f"[trcomp] {reason}", file=sys.stderr, flush=True)
            raise SystemExit(_EX_CONFIG)

        guard_device_calls(torch_xla, stop)


class _AfterImport(importlib.abc.MetaPathFinder):
    """Runs a callback right after a module is first imported, once."""

    def __init__(self, callbacks: dict[str, Callable[[ModuleType], None]]) -> None:
        self.callbacks = callbacks

    def find_spec(
        self, fullname: str, path: Sequence[str] | None, target: ModuleType | None = None
    ) -> importlib.machinery.ModuleSpec | None:
        callback = self.callbacks.pop(fullname, None)
        if callback is None:
            return None
        spec = None
        for finder in sys.meta_path:
            if finder is self or not hasattr(finder, "find_spec"):
                continue
            spec = finder.find_spec(fullname, path, target)
            if spec is not None:
                break
        loader = getattr(spec, "loader", None)
        if spec is None or loader is None or not hasattr(loader, "exec_module"):
            return spec
        original = loader.exec_module

        def exec_module(module: ModuleType) -> None:
            original(module)
            try:
                callback(module)
            except Exception as exc:  # never break the user's script over metrics
                print(f"[trcomp] metrics hook disabled for {fullname}: {exc}", file=sys.stderr)

        loader.exec_module = exec_module  # type: ignore[method-assign]
        return spec


def _except_hook(kind: type[BaseException], value: BaseException, tb: TracebackType | None) -> None:
    lines = "".join(traceback.format_exception(kind, value, tb)).splitlines()
    _state.error = {
        "type": kind.__name__,
        "message": str(value),
        "traceback_tail": "\n".join(lines[-_TRACEBACK_LINES:]),
    }
    _previous_except_hook(kind, value, tb)


def _dump() -> None:
    directory = os.environ.get("TRCOMP_METRICS_DIR")
    compiled = _state.compile_events > 0 or any(
        name in sys.modules for name in ("torch_xla", "trcomp.runtime_jax")
    )
    if not directory or not (_state.steps or compiled or _state.error or _state.warnings):
        return
    rank = os.environ.get("RANK", "0")
    body: dict[str, Any] = {
        "rank": int(rank),
        "local_rank": int(os.environ.get("LOCAL_RANK", "0")),
        "pid": os.getpid(),
        "backend": os.environ.get("TRCOMP_BACKEND", "eager"),
        "wall_s": round(time.time() - _START, 4),
        "steps": _state.steps,
        "first_step_s": _state.first_step_s,
        "step_intervals_s": [round(value, 6) for value in _state.clock.intervals()],
        "step_clock": _state.clock.source,
        "error": _state.error,
        "warnings": _state.warnings,
        "versions": trcomp_reports.versions(),
    }
    try:
        if _switch is not None:
            body.update(_switch.report(time.time() - _START))
            body["warnings"] = [*_state.warnings, *_switch.warnings]
        aot = _switch.aot_report() if _switch is not None else None
        body["compile"] = trcomp_reports.compile_report(
            _state.compile_s + (aot["seconds"] if aot else 0.0),
            _state.compile_events + (aot["events"] if aot else 0),
            _state.recompiles,
        )
        body["compile"]["aot"] = aot
        if aot:  # a loaded artifact runs a compiled graph dynamo never counted; a
            # failed attempt's graph, which dynamo counted, never runs
            body["compile"]["graphs"] += aot["loaded"] - aot["discarded_graphs"]
        body["xla"] = trcomp_reports.xla_report(
            _state.xla_compiles_at_step3, _state.xla_compiles_at_last_step
        )
        body["jax"] = trcomp_reports.jax_report()
        if os.environ.get("TRCOMP_DEBUG") == "1":
            trcomp_reports.write_debug_reports(rank)
    except Exception as exc:
        body["hook_error"] = f"{type(exc).__name__}: {exc}"
    path = Path(directory) / f"rank{rank}-pid{os.getpid()}.json"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(body, indent=1))


def _chain_next_sitecustomize() -> None:
    here = os.path.dirname(os.path.abspath(__file__))
    rest = [entry for entry in sys.path if os.path.abspath(entry or ".") != here]
    spec = importlib.machinery.PathFinder.find_spec("sitecustomize", rest)
    if spec is None or spec.loader is None:
        return
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)


_previous_except_hook = sys.excepthook
if os.environ.get("TRCOMP_METRICS_DIR"):
    sys.meta_path.insert(
        0,
        _AfterImport(
            {
                "torch": _after_torch,
                "torch._dynamo": _after_dynamo,
                "torch._inductor.codecache": _after_codecache,
                "torch._inductor.remote_cache": _after_remote_cache,
                "torch_xla": _after_torch_xla,
            }
        ),
    )
    sys.excepthook = _except_hook
    atexit.register(_dump)
_chain_next_sitecustomize()
