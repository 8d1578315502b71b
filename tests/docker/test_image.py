"""The training image holds what a job needs, and runs `train` as SageMaker does."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pytest

pytestmark = pytest.mark.container

_VERSIONS = """
import json, importlib.metadata as md
import torch, torch_xla, sagemaker_training, trcomp, trcomp_container
import transformers, accelerate
print(json.dumps({name: md.version(name) for name in
      ("torch", "torch-xla", "sagemaker-training", "trcomp", "transformers", "accelerate")}))
"""


def _run(image: str, *args: str, entrypoint: str | None = None) -> str:
    """``docker run IMAGE ARGS``; ``-v`` pairs among ARGS go before the image."""
    cmd = ["docker", "run", "--rm", "--network", "none"]
    if entrypoint:
        cmd += ["--entrypoint", entrypoint]
    rest = list(args)
    while "-v" in rest:
        at = rest.index("-v")
        cmd += rest[at : at + 2]
        del rest[at : at + 2]
    proc = subprocess.run(
        [*cmd, image, *rest], capture_output=True, text=True, check=False, timeout=300
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    return proc.stdout


def test_image_holds_torch_xla_toolkit_and_trcomp(image: str) -> None:
    versions = json.loads(_run(image, "python3", "-c", _VERSIONS).strip().splitlines()[-1])
    assert versions["torch"].split("+")[0] == "2.9.0"
    assert versions["torch-xla"] == "2.9.0"
    assert versions["sagemaker-training"] >= "5.1"
    from trcomp import __version__

    assert versions["trcomp"] == __version__
    # The hf extra's range: what trcomp.HuggingFace jobs import.
    assert versions["transformers"] >= "4.57" and versions["accelerate"] >= "1.0"


def test_image_environment(image: str) -> None:
    env = dict(line.split("=", 1) for line in _run(image, "env", entrypoint="env").splitlines())
    assert env["SAGEMAKER_TRAINING_MODULE"] == "trcomp_container.training:main"
    assert env["PYTHONDONTWRITEBYTECODE"] == "1"
    assert env["NVIDIA_VISIBLE_DEVICES"] == "all"
    assert env["NVIDIA_DRIVER_CAPABILITIES"] == "compute,utility"
    assert env["USE_TORCH_XLA"] == "0"  # the entrypoint sets 1 for the torch-xla engine only
    assert _run(image, "train", entrypoint="which").strip()


def test_train_runs_a_script_like_sagemaker(image: str, tmp_path: Path) -> None:
    """`docker run IMAGE train` with a hand-made /opt/ml tree, the way SageMaker starts it."""
    ml = tmp_path / "ml"
    (ml / "code").mkdir(parents=True)
    (ml / "code" / "hello.py").write_text(
        "import os, sys\n"
        "path = os.path.join(os.environ['SM_MODEL_DIR'], 'hello.txt')\n"
        "open(path, 'w').write(' '.join(sys.argv[1:]))\n"
    )
    config = ml / "input" / "config"
    config.mkdir(parents=True)
    (ml / "input" / "data").mkdir()
    (ml / "model").mkdir()
    (ml / "output" / "data").mkdir(parents=True)
    hps = {
        "greeting": '"hi"',
        "sagemaker_program": '"hello.py"',
        "sagemaker_submit_directory": '"/opt/ml/code"',
        "sagemaker_training_compiler_enabled": '"false"',
    }
    (config / "hyperparameters.json").write_text(json.dumps(hps))
    (config / "resourceconfig.json").write_text(
        json.dumps({"current_host": "algo-1", "hosts": ["algo-1"]})
    )
    (config / "inputdataconfig.json").write_text("{}")
    proc = subprocess.run(
        [
            "docker",
            "run",
            "--rm",
            "--network",
            "none",
            "--hostname",
            "algo-1",
            "--add-host",
            "algo-1:127.0.0.1",
            "-v",
            f"{ml}:/opt/ml",
            image,
            "train",
        ],
        capture_output=True,
        text=True,
        check=False,
        timeout=300,
    )
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    assert (ml / "model" / "hello.txt").read_text() == "--greeting hi"
    assert not list(ml.rglob("__pycache__"))


def test_entrypoint_gives_files_back_to_the_mount_owner(image: str, tmp_path: Path) -> None:
    model = tmp_path / "model"
    model.mkdir()
    os.chown(model, 4321, 4321)
    _run(
        image,
        "sh",
        "-c",
        "mkdir /opt/ml/model/sub && touch /opt/ml/model/sub/f",
        "-v",
        f"{model}:/opt/ml/model",
    )
    assert {(p.stat().st_uid, p.stat().st_gid) for p in model.rglob("*")} == {(4321, 4321)}


def test_entrypoint_leaves_data_channels_and_older_files_alone(image: str, tmp_path: Path) -> None:
    """Only what the job wrote in model/output/checkpoints changes owner; data is never walked."""
    model, data = tmp_path / "model", tmp_path / "data"
    for directory in (model, data):
        directory.mkdir()
        (directory / "old").write_text("root's, from before the job")
        os.utime(directory / "old", (1_000_000_000, 1_000_000_000))
        os.chown(directory, 4321, 4321)
    _run(
        image,
        "sh",
        "-c",
        "touch /opt/ml/model/new /opt/ml/input/data/train/new",
        "-v",
        f"{model}:/opt/ml/model",
        "-v",
        f"{data}:/opt/ml/input/data/train",
    )
    assert (model / "new").stat().st_uid == 4321
    assert (model / "old").stat().st_uid == 0
    assert (data / "new").stat().st_uid == 0
    assert (data / "old").stat().st_uid == 0


def test_entrypoint_writes_a_failure_reason_when_the_command_did_not(
    image: str, tmp_path: Path
) -> None:
    output = tmp_path / "output"
    output.mkdir()
    proc = subprocess.run(
        [
            "docker",
            "run",
            "--rm",
            "--network",
            "none",
            "-v",
            f"{output}:/opt/ml/output",
            image,
            "sh",
            "-c",
            "kill -9 $$",
        ],
        capture_output=True,
        text=True,
        check=False,
        timeout=120,
    )
    assert proc.returncode == 137
    assert "out of memory" in (output / "failure").read_text()
