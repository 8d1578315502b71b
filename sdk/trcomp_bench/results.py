"""Benchmark results: the markdown table writer every report uses, and the CPU row.

:func:`table` and :func:`table_row` write every markdown table of the benchmark
(the CPU rows, the GPU script's report, the launch overhead, the batch-size
finder); :func:`write_text` writes every result file, :func:`write_recorded` the
``recorded`` tables of the side-by-side tools; :class:`Row` is one CPU
measurement, with its JSON and PNG forms.
"""

from __future__ import annotations

import datetime
import json
from collections.abc import Callable, Iterable, Sequence
from dataclasses import asdict, dataclass, fields
from pathlib import Path
from typing import Any

from trcomp_bench.rounds import ratio_and_spread

__all__ = [
    "ROUND_KEYS",
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
    "write_recorded",
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

    The rounds (:mod:`trcomp_bench.rounds`): ``round_step_s``, the median step
    of each round's run (the cold round first); ``round_load``, the 1-minute load
    average before and after each round's run (``[before, after]``, None where
    the system has none); ``vs_eager_rounds``, each round's speed-up over the
    eager run of the same round (None on eager's own row and without one); ``unreliable``, why
    the row's ratios are not to be trusted (the load changed, or the rounds
    disagree), None when nothing says so. All four None in rows written before
    rounds were kept.
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
    round_step_s: list[float] | None = None
    round_load: list[list[float | None]] | None = None
    vs_eager_rounds: list[float] | None = None
    unreliable: str | None = None

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Row:
        """A row from its JSON object; unknown or missing keys are an error.

        The keys of the shared round and of the rounds may be missing (rows
        written before they existed).
        """
        optional = (*SHARED_KEYS, *ROUND_KEYS)
        if not set(ROW_KEYS) - set(optional) <= set(data) <= set(ROW_KEYS):
            raise ValueError(
                f"a benchmark row has exactly the keys {', '.join(ROW_KEYS)} "
                f"(those of the shared round and the rounds, {', '.join(optional)}, "
                "may be missing)"
            )
        return cls(**data)

    def vs_eager(self, eager_step_s: float | None) -> float | None:
        """The speed-up over eager: the median of the rounds' ratios where they were kept.

        Rows written before rounds were kept: ``eager_step_s`` over this row's step.
        """
        if self.vs_eager_rounds:
            return ratio_and_spread(self.vs_eager_rounds)[0]
        return None if eager_step_s is None else eager_step_s / self.step_s


ROW_KEYS: tuple[str, ...] = tuple(f.name for f in fields(Row))
SHARED_KEYS: tuple[str, ...] = ("first_step_shared_s", "shared_read")
ROUND_KEYS: tuple[str, ...] = ("round_step_s", "round_load", "vs_eager_rounds", "unreliable")


def write_recorded(
    header: Sequence[str], rows: Sequence[Sequence[str]], source: str, path: Path | None
) -> dict[str, Any]:
    """A ``recorded`` table (:mod:`trcomp_bench.doctables`) dated today: printed, and written
    to ``path`` when given. Returns it."""
    data = {
        "measured": datetime.date.today().isoformat(),
        "source": source,
        "header": list(header),
        "rows": [list(row) for row in rows],
    }
    print(json.dumps(data, indent=2))
    if path is not None:
        path.write_text(json.dumps(data, indent=2) + "\n")
    return data


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


def _spread(row: Row) -> str:
    if row.backend == "eager" or not row.vs_eager_rounds:
        return "n/a"
    _, low, high = ratio_and_spread(row.vs_eager_rounds)
    return f"{low:.2f}-{high:.2f}x ({len(row.vs_eager_rounds)})"


def _load(row: Row) -> str:
    known = [load for pair in row.round_load or [] for load in pair if load is not None]
    return f"{min(known):.1f}-{max(known):.1f}" if known else "n/a"


def markdown_table(rows: list[Row]) -> str:
    """The CPU rows as a table; "vs eager" is the speed-up over eager (>1 is faster).

    With rounds (:mod:`trcomp_bench.rounds`), "vs eager" is the median of the
    rounds' ratios, followed by their spread (smallest to largest, and how many
    rounds), and the table ends with the 1-minute load average over the row's
    runs and whether its ratios can be trusted ("ok", or why not). Rows written
    before rounds were kept have neither: eager's step time over the row's.
    The shared column is there only when some row went through the shared round.
    """
    eager = _eager_step(rows)
    shared = any(r.shared_read is not None for r in rows)
    rounds = any(r.round_step_s is not None for r in rows)
    header = (
        "workload", "backend", "device", "batch", "first step cold (s)", "first step warm (s)",
        *(("first step warm, shared (s)",) if shared else ()),
        "step (ms)", "samples/s", "vs eager",
        *(("vs eager, rounds min-max (n)",) if rounds else ()),
        "peak mem (MiB)", "max loss diff",
        *(("load avg (1 min)", "ratios") if rounds else ()),
    )  # fmt: skip
    cells = []
    for r in rows:
        ratio = r.vs_eager(eager.get(r.workload))
        cells.append((
            r.workload, r.backend, r.device, r.batch_size, f"{r.first_step_cold_s:.2f}",
            _num(r.first_step_warm_s, ".2f"),
            *((_num(r.first_step_shared_s, ".2f"),) if shared else ()),
            f"{r.step_s * 1e3:.1f}", f"{r.samples_per_s:.0f}", f"{_num(ratio, '.2f')}x",
            *((_spread(r),) if rounds else ()),
            f"{r.peak_mem_mb:.0f}", _num(r.max_loss_diff, ".1e"),
            *((_load(r), r.unreliable or "ok") if rounds else ()),
        ))  # fmt: skip
    return table(header, cells)


def _error_bar(row: Row | None, ratio: float) -> tuple[float, float]:
    """How far the rounds' smallest and largest ratio lie below and above ``ratio``."""
    if row is None or not row.vs_eager_rounds:
        return (0.0, 0.0)
    _, low, high = ratio_and_spread(row.vs_eager_rounds)
    return (ratio - low, high - ratio)


def plot(
    rows: list[Row], path: Path, title: str = "trcomp bench: eager against each compiler"
) -> list[str]:
    """A two-panel PNG: steady-step speed-up over eager, and time to first step.

    The speed-up bars have the rounds' spread as error bars where rounds were kept.

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
        ratios = [(r.vs_eager(eager.get(r.workload)) or 0) if r else 0 for r in got]
        spreads = [_error_bar(r, ratio) for r, ratio in zip(got, ratios, strict=True)]
        speed.bar(xs, ratios, width, label=backend, yerr=list(zip(*spreads, strict=True)))
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
