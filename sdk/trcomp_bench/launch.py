"""Launch overhead: what a ``fit()`` costs beyond the user's own script.

Runs one trivial script, which records its own start and end, through process
mode, Docker local mode and a plain ``docker run`` of the same image against
the same ``/opt/ml`` tree, interleaved so machine drift hits every way alike.
Overhead is wall time minus the script's own time.

    python -m trcomp_bench.launch --repeats 3 --json launch.json

Docker rows need the Docker engine and the image (``make image``); without
them only process mode is measured.
"""

from __future__ import annotations

import argparse
import json
import shutil
import statistics
import sys
import tarfile
import tempfile
import time
from pathlib import Path
from typing import Any

from trcomp_bench.results import table, write_text

__all__ = ["SCRIPT", "main", "markdown_table", "measure"]

SCRIPT = """\
import json, os, pathlib, time
start = time.time()
pathlib.Path(os.environ["SM_MODEL_DIR"], "times.json").write_text(
    json.dumps({"start": start, "end": time.time()}))
"""
ROLE = "arn:aws:iam::111122223333:role/unused-locally"


def _script_seconds(times: dict[str, float]) -> float:
    return times["end"] - times["start"]


def _fit(work: Path, instance_type: str, compiler: bool) -> tuple[float, float]:
    from trcomp import PyTorch, TrainingCompilerConfig

    out = work / f"out-{instance_type}"
    shutil.rmtree(out, ignore_errors=True)
    estimator = PyTorch(
        entry_point="train.py",
        source_dir=str(work / "src"),
        role=ROLE,
        instance_type=instance_type,
        instance_count=1,
        output_path=f"file://{out}",
        compiler_config=TrainingCompilerConfig(enabled=compiler),
    )
    started = time.monotonic()
    # logs="All": with "None" the SDK's local mode polls the finished job for seconds.
    estimator.fit(logs="All")
    wall = time.monotonic() - started
    # Process mode packs into <out>/<job>/output/, Docker local mode into <out>/.
    with tarfile.open(next(out.rglob("model.tar.gz"))) as tar:
        member = tar.extractfile("times.json")
        assert member is not None
        return wall, _script_seconds(json.load(member))


def _docker_run(work: Path, image: str, compiler: bool) -> tuple[float, float]:
    from trcomp import TrainingCompilerConfig
    from trcomp.docker_cli import run_docker
    from trcomp.local.tree import lay_out_tree

    tree = work / "tree"
    shutil.rmtree(tree, ignore_errors=True)
    hyperparameters = TrainingCompilerConfig(enabled=compiler).to_hyperparameters()
    # Inside the container the tree is /opt/ml, so the code directory moves too.
    hyperparameters["sagemaker_submit_directory"] = json.dumps("/opt/ml/code")
    lay_out_tree(
        tree,
        hyperparameters=hyperparameters,
        encoded=True,
        source_dir=work / "src",
        entry_point="train.py",
    )
    args = ["run", "--rm", "--network", "none", "-v", f"{tree}:/opt/ml", image, "train"]
    started = time.monotonic()
    run_docker(args, timeout=None, check=True)
    wall = time.monotonic() - started
    return wall, _script_seconds(json.loads((tree / "model" / "times.json").read_text()))


def measure(repeats: int = 3, compiler: bool = True, docker: bool = True) -> list[dict[str, Any]]:
    """Median wall, script and overhead seconds per way of launching."""
    from trcomp.docker_cli import image_present
    from trcomp.image.uris import local_image_uri

    image = local_image_uri()
    ways: dict[str, Any] = {"process mode": lambda w: _fit(w, "local_process", compiler)}
    if docker and image_present(image):
        ways["docker local mode"] = lambda w: _fit(w, "local", compiler)
        ways["plain docker run"] = lambda w: _docker_run(w, image, compiler)
    samples: dict[str, list[tuple[float, float]]] = {name: [] for name in ways}
    with tempfile.TemporaryDirectory(prefix="trcomp-launch-") as tmp:
        work = Path(tmp)
        (work / "src").mkdir()
        (work / "src" / "train.py").write_text(SCRIPT)
        for _ in range(repeats):
            for name, run in ways.items():
                samples[name].append(run(work))
                print(f"{name}: wall {samples[name][-1][0]:.2f}s", file=sys.stderr, flush=True)
    rows = []
    for name, runs in samples.items():
        walls = [wall for wall, _ in runs]
        overheads = [wall - script for wall, script in runs]
        rows.append(
            {
                "launch": name,
                "compiler": compiler,
                "repeats": len(runs),
                "wall_s": round(statistics.median(walls), 2),
                "overhead_s": round(statistics.median(overheads), 2),
            }
        )
    return rows


def markdown_table(rows: list[dict[str, Any]]) -> str:
    """The rows of :func:`measure` as a markdown table."""
    header = ("launch", "compiler", "repeats", "median wall (s)", "median overhead (s)")
    cells = [
        (row["launch"], "on" if row["compiler"] else "off", row["repeats"],
         f"{row['wall_s']:.2f}", f"{row['overhead_s']:.2f}")
        for row in rows
    ]  # fmt: skip
    return table(header, cells)


def main(argv: list[str] | None = None) -> int:
    """Command line: print a markdown table, optionally write JSON."""
    parser = argparse.ArgumentParser(description="Measure fit() launch overhead.")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--compiler", choices=["on", "off"], default="on")
    parser.add_argument("--no-docker", action="store_true", help="measure process mode only")
    parser.add_argument("--json", type=Path, help="write the rows here")
    args = parser.parse_args(argv)
    rows = measure(args.repeats, args.compiler == "on", not args.no_docker)
    print(markdown_table(rows), end="")
    if args.json:
        write_text(args.json, json.dumps(rows, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
