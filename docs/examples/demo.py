"""The main job: a real ``estimator.fit()`` with the compiler on, on this machine.

Makes a small token data set, then trains ``tiny_lm/train.py`` through
``trcomp.PyTorch`` in process mode (``instance_type="local_process"``, no
Docker needed) with ``TrainingCompilerConfig()`` (inductor on CPU), and prints
where the model is and what the compiler did. Run it with ``make demo``.

Pass ``--instance-type local`` to run the same job in Docker local mode
(needs ``make image`` first).
"""

from __future__ import annotations

import argparse
import json
import tarfile
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parent


def make_data(directory: Path, vocab: int = 64, rows: int = 512, seq_len: int = 33) -> Path:
    """Sequences that count up by a per-row stride modulo ``vocab``: learnable, made here."""
    import torch

    generator = torch.Generator().manual_seed(0)
    start = torch.randint(0, vocab, (rows, 1), generator=generator)
    stride = torch.randint(1, 5, (rows, 1), generator=generator)
    tokens = (start + stride * torch.arange(seq_len)) % vocab
    directory.mkdir(parents=True, exist_ok=True)
    torch.save({"tokens": tokens, "vocab": vocab}, directory / "tokens.pt")
    return directory


def speedup_text(speedup: dict) -> str:
    """``1.32x vs eager, measured in this job; kept compiled``, or why it was not measured."""
    if speedup.get("speedup_vs_eager") is None:
        return f"not measured ({speedup.get('reason')})"
    where = "in this job" if speedup.get("source") == "measured" else "by an earlier job"
    return f"{speedup['speedup_vs_eager']:.2f}x vs eager, measured {where}; kept {speedup['kept']}"


def main(argv: list[str] | None = None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--instance-type", default="local_process")
    parser.add_argument("--steps", type=int, default=40)
    parser.add_argument("--backend", default="auto", choices=["auto", "inductor", "xla"])
    parser.add_argument("--work-dir", type=Path, default=None)
    args = parser.parse_args(argv)

    from trcomp import PyTorch, TrainingCompilerConfig
    from trcomp.contract.metrics import METRICS

    work = args.work_dir or Path(tempfile.mkdtemp(prefix="trcomp-demo-"))
    data = make_data(work / "data")
    estimator = PyTorch(
        entry_point="train.py",
        source_dir=str(HERE / "tiny_lm"),
        role="arn:aws:iam::111122223333:role/unused-locally",
        instance_type=args.instance_type,
        instance_count=1,
        hyperparameters={"steps": args.steps},
        output_path=f"file://{work / 'output'}",
        checkpoint_s3_uri=f"file://{work / 'checkpoints'}",
        compiler_config=TrainingCompilerConfig(backend=args.backend),
    )
    estimator.fit({"train": f"file://{data}"})

    # <output_path>/<job name>/output/, next to model.tar.gz
    output_tar = Path(str(estimator.model_data).removeprefix("file://")).with_name("output.tar.gz")
    with tarfile.open(output_tar) as tar:
        member = next(m for m in tar.getmembers() if m.name.endswith("compiler/summary.json"))
        extracted = tar.extractfile(member)
        assert extracted is not None
        summary = json.load(extracted)
    metrics = summary.get("metrics", {})
    print(f"\nmodel:    {estimator.model_data}")
    print(f"output:   file://{output_tar} (compiler summary: {member.name})")
    print(f"backend:  {summary.get('backend')} (asked: {summary.get('requested_backend')})")
    for name in METRICS:
        print(f"{name + ':':17} {metrics.get(name, 'n/a')}")
    print(f"compiled: {summary.get('compiled')}")
    print(f"speed-up: {speedup_text(summary.get('speedup') or {})}")
    print(f"cache:    {'warm' if summary.get('cache_warm') else 'cold'} ({work / 'checkpoints'})")
    return summary


if __name__ == "__main__":
    main()
