"""Benchmark results: the markdown table writer every report uses, and the CPU row.

:func:`table` and :func:`table_row` write every markdown table of the benchmark
(the CPU rows, the GPU script's report, the launch overhead, the batch-size
finder); :func:`write_text` writes every result file; :class:`Row` is one CPU
measurement, with its JSON and PNG forms.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable, Sequence
from dataclasses import asdict, dataclass, fields
from pathlib import Path
from typing import Any

__all__ = [
    "ROW_KEYS",
    "SHARED_KEYS",
    "Row",
    "markdown_table",
    "plot",
    "read_json",
    "table",
    "table_head",
    "table_row",
    "write_json",
    "write_text",
]


def table_row(cells: Sequence[object]) -> str:
    """One markdown table line: ``| a | b |``."""
    return "| " + " | ".join(str(cell) for cell in cells) + " |"


def table_head(header: Sequence[str]) -> str:
    """The header line and the separator line of a markdown table (for row-by-row output)."""
    return table_row(header) + "\n|" + "---|" * len(header)


def table(header: Sequence[str], rows: Iterable[Sequence[object]]) -> str:
    """A GitHub markdown table, ending with a newline."""
    return "\n".join([table_head(header), *(table_row(cells) for cells in rows)]) + "\n"


@dataclass(frozen=True)
class Row:
    """One (workload, backend) measurement. Times in seconds, memory in MiB.

    ``first_step_*_s``: from the compile call to the end of the first optimizer
    step, in a fresh process, with an empty (cold) or filled (warm) compile
    cache. ``step_s``: median steady-state step. ``peak_mem_mb``: CUDA max
    allocated on GPU, peak process RSS elsewhere. ``max_loss_diff``: largest
    per-step loss difference against eager over the same steps, in every run
    of the row (eager's own row: its warm runs against its cold run); None
    without an eager run.

    ``first_step_shared_s``: the first step in a fresh process whose cache dir
    is another, empty one, filled only from the shared compile cache the cold
    run wrote (a job of another lineage); ``shared_read``: what that read
    brought (``entries``, ``files``, ``bytes``) and, on inductor, the shared
    run's FX graph cache ``fxgraph_hits`` and ``fxgraph_misses``. Both None
    where the shared round did not run (eager, ``--no-shared``, rows written
    before it existed). ``shared_read`` without a time: the read found nothing
    or the shared run failed (the benchmark's errors say which).
    """

    workload: str
    backend: str
    device: str
    batch_size: int
    first_step_cold_s: float
    first_step_warm_s: float | None
    step_s: float
    samples_per_s: float
    peak_mem_mb: float
    max_loss_diff: float | None
    first_step_shared_s: float | None = None
    shared_read: dict[str, int] | None = None

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Row:
        """A row from its JSON object; unknown or missing keys are an error.

        The shared round's keys may be missing (rows written before it existed).
        """
        if not set(ROW_KEYS) - set(SHARED_KEYS) <= set(data) <= set(ROW_KEYS):
            raise ValueError(
                f"a benchmark row has exactly the keys {', '.join(ROW_KEYS)} "
                f"(those of the shared round, {', '.join(SHARED_KEYS)}, may be missing)"
            )
        return cls(**data)


ROW_KEYS: tuple[str, ...] = tuple(f.name for f in fields(Row))
SHARED_KEYS: tuple[str, ...] = ("first_step_shared_s", "shared_read")


def write_text(path: Path, text: str) -> None:
    """Replace ``path`` with ``text`` atomically (a stopped run never leaves half a file)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    partial = path.with_name(path.name + ".partial")
    partial.write_text(text)
    partial.replace(path)


def write_json(rows: list[Row], path: Path) -> None:
    """Write ``rows`` as a JSON list of objects with :data:`ROW_KEYS`."""
    write_text(path, json.dumps([asdict(r) for r in rows], indent=2) + "\n")


def read_json(path: Path) -> list[Row]:
    """The rows :func:`write_json` wrote."""
    return [Row.from_dict(item) for item in json.loads(path.read_text())]


def _eager_step(rows: list[Row]) -> dict[str, float]:
    return {r.workload: r.step_s for r in rows if r.backend == "eager"}


def _num(value: float | None, fmt: str) -> str:
    return "n/a" if value is None else format(value, fmt)


def markdown_table(rows: list[Row]) -> str:
    """The CPU rows as a table; "vs eager" is eager's step time over this row's (>1 is faster).

    The shared column is there only when some row went through the shared round.
    """
    eager = _eager_step(rows)
    shared = any(r.shared_read is not None for r in rows)
    header = (
        "workload", "backend", "device", "batch", "first step cold (s)", "first step warm (s)",
        *(("first step warm, shared (s)",) if shared else ()),
        "step (ms)", "samples/s", "vs eager", "peak mem (MiB)", "max loss diff",
    )  # fmt: skip
    cells = []
    for r in rows:
        ratio = eager[r.workload] / r.step_s if r.workload in eager else None
        cells.append((
            r.workload, r.backend, r.device, r.batch_size, f"{r.first_step_cold_s:.2f}",
            _num(r.first_step_warm_s, ".2f"),
            *((_num(r.first_step_shared_s, ".2f"),) if shared else ()),
            f"{r.step_s * 1e3:.1f}", f"{r.samples_per_s:.0f}",
            f"{_num(ratio, '.2f')}x", f"{r.peak_mem_mb:.0f}", _num(r.max_loss_diff, ".1e"),
        ))  # fmt: skip
    return table(header, cells)


def plot(
    rows: list[Row], path: Path, title: str = "trcomp bench: eager against each compiler"
) -> list[str]:
    """A two-panel PNG: steady-step speed-up over eager, and time to first step.

    The first-step panel has a cold and a warm bar per backend, and a shared
    bar (hatched) when some row went through the shared round. Returns that
    panel's series labels.
    """
    import matplotlib

    matplotlib.use("Agg")  # no display: files only
    import matplotlib.pyplot as plt

    workloads = list(dict.fromkeys(r.workload for r in rows))
    backends = list(dict.fromkeys(r.backend for r in rows))
    eager = _eager_step(rows)
    by_key = {(r.workload, r.backend): r for r in rows}
    width = 0.8 / max(len(backends), 1)
    kinds: list[tuple[str, Callable[[Row], float | None], dict[str, Any]]] = [
        ("cold", lambda r: r.first_step_cold_s, {"alpha": 0.4}),
        ("warm", lambda r: r.first_step_warm_s, {}),
    ]
    if any(r.first_step_shared_s is not None for r in rows):
        kinds.append(("shared", lambda r: r.first_step_shared_s, {"hatch": "//", "alpha": 0.7}))
    part = width / len(kinds)
    labels: list[str] = []
    fig, (speed, first) = plt.subplots(1, 2, figsize=(10, 3.6), dpi=80)
    for i, backend in enumerate(backends):
        xs = [w + i * width for w in range(len(workloads))]
        got = [by_key.get((w, backend)) for w in workloads]
        ratios = [eager[r.workload] / r.step_s if r and r.workload in eager else 0 for r in got]
        speed.bar(xs, ratios, width, label=backend)
        for k, (kind, value, style) in enumerate(kinds):
            heights = [(value(r) or 0) if r else 0 for r in got]
            if not any(heights):
                continue  # eager has nothing shared
            offsets = [x - width / 2 + part * (k + 0.5) for x in xs]
            label = f"{backend} {kind}"
            first.bar(offsets, heights, part, label=label, color=f"C{i}", **style)
            labels.append(label)
    centre = [w + 0.4 - width / 2 for w in range(len(workloads))]
    speed.axhline(1.0, color="black", linewidth=0.8)
    speed.set(title="steady step: speed-up over eager (>1 faster)", ylabel="x")
    caches = ", ".join(kind for kind, _, _ in kinds)
    first.set(title=f"time to first step (s): {caches} cache", ylabel="s", yscale="log")
    for ax in (speed, first):
        ax.set_xticks(centre, workloads)
    tallest = max((r.first_step_cold_s for r in rows), default=1.0)
    first.set_ylim(top=tallest * 30)  # head room for the legend on the log scale
    speed.legend(fontsize=8)
    first.legend(fontsize=7, ncol=3, loc="upper left")
    fig.suptitle(title, fontsize=10)
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path)
    plt.close(fig)
    return labels
