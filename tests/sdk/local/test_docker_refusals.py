"""Docker local mode refuses bad jobs before it creates anything (no engine needed)."""

from __future__ import annotations

import tempfile
from pathlib import Path
from typing import Any

import pytest

from trcomp import LocalModeError, PyTorch


@pytest.mark.parametrize(
    ("kwargs", "fit", "message"),
    [
        ({}, {"job_name": "has space"}, "job_name 'has space' is not a valid SageMaker"),
        ({}, {"job_name": "x" * 64}, "is not a valid SageMaker training job name"),
        ({}, {"inputs": {"training": "file:///does/not/exist"}}, "does not exist"),
        ({"entry_point": "train me.py"}, {}, "entry_point='train me.py' cannot be run"),
        ({"checkpoint_s3_uri": "s3://bucket/ckpt"}, {}, "does not sync checkpoints with S3"),
        ({"output_path": "FILE/out"}, {}, "output_path .* is a file, not a directory"),
        ({"checkpoint_s3_uri": "FILE/ckpt"}, {}, "checkpoint_s3_uri .* is a file"),
    ],
)
def test_refusals_leave_nothing_behind(
    tmp_path: Path, role: str, monkeypatch: pytest.MonkeyPatch, kwargs: Any, fit: Any, message: str
) -> None:
    scratch = tmp_path / "tmp"
    scratch.mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(scratch))
    source = tmp_path / "src"
    source.mkdir()
    (tmp_path / "FILE").write_text("a file, not a directory")
    entry_point = kwargs.pop("entry_point", "train.py")
    (source / entry_point).write_text("print('never runs')\n")
    for key in ("output_path", "checkpoint_s3_uri"):
        if str(kwargs.get(key, "")).startswith("FILE"):
            kwargs[key] = f"file://{tmp_path / kwargs[key]}"
    kwargs.setdefault("output_path", f"file://{tmp_path / 'out'}")
    estimator = PyTorch(
        entry_point=entry_point,
        source_dir=str(source),
        role=role,
        instance_type="local",
        instance_count=1,
        image_uri="trcomp-training:never-pulled",
        **kwargs,
    )
    with pytest.raises(LocalModeError, match=message):
        estimator.fit(fit.get("inputs"), job_name=fit.get("job_name"))
    assert not list(scratch.iterdir())
    assert not (tmp_path / "out").exists()
