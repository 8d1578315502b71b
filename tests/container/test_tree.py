"""lay_out_tree writes the tree SageMaker mounts, and the toolkit reads it back."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from tests.helpers import jobs
from trcomp.local.tree import lay_out_tree


def test_tree_layout_and_json_encoded_hyperparameters(tmp_path):
    data = tmp_path / "data.csv"
    data.write_text("1,2\n")
    base = lay_out_tree(
        tmp_path / "ml",
        hyperparameters={"epochs": 3, "name": "x", "flags": {"a": 1}},
        channels={"train": data},
        source_dir=jobs.SCRIPTS,
        entry_point="loop.py",
    )
    for sub in ("model", "output/data", "checkpoints", "code/loop.py", "input/data/train/data.csv"):
        assert (base / sub).exists(), sub
    hps = json.loads((base / "input/config/hyperparameters.json").read_text())
    assert hps["epochs"] == "3" and hps["name"] == '"x"' and hps["flags"] == '{"a": 1}'
    assert hps["sagemaker_program"] == '"loop.py"'
    assert json.loads(hps["sagemaker_submit_directory"]) == str(base / "code")
    resources = json.loads((base / "input/config/resourceconfig.json").read_text())
    assert resources["hosts"] == ["localhost"] and resources["current_host"] == "localhost"
    channels = json.loads((base / "input/config/inputdataconfig.json").read_text())
    assert channels["train"]["TrainingInputMode"] == "File"


def test_encoded_values_are_written_verbatim(tmp_path):
    base = lay_out_tree(tmp_path, hyperparameters={"lr": "0.1", "name": '"x"'}, encoded=True)
    hps = json.loads((base / "input/config/hyperparameters.json").read_text())
    assert hps["lr"] == "0.1" and hps["name"] == '"x"'
    with pytest.raises(TypeError):
        lay_out_tree(tmp_path, hyperparameters={"lr": 0.1}, encoded=True)


def test_current_host_must_be_listed(tmp_path):
    with pytest.raises(ValueError, match="current_host"):
        lay_out_tree(tmp_path, hyperparameters={}, hosts=("algo-1",), current_host="algo-2")


def test_the_toolkit_reads_the_tree(tmp_path):
    base = lay_out_tree(
        tmp_path / "ml",
        hyperparameters={"epochs": 3, "sagemaker_training_compiler_enabled": True},
        source_dir=jobs.SCRIPTS,
        entry_point="loop.py",
    )
    code = (
        "import json; from sagemaker_training import environment as e; env = e.Environment();"
        "print(json.dumps([env.hyperparameters, env.additional_framework_parameters,"
        " env.user_entry_point, env.hosts, env.model_dir, env.to_cmd_args()]))"
    )
    done = subprocess.run(
        [sys.executable, "-c", code],
        env=jobs.job_env(base),
        capture_output=True,
        text=True,
        check=True,
    )
    hps, framework, entry, hosts, model_dir, argv = json.loads(done.stdout.splitlines()[-1])
    assert hps == {"epochs": 3}
    assert framework == {"sagemaker_training_compiler_enabled": True}
    assert (entry, hosts, model_dir) == ("loop.py", ["localhost"], str(base / "model"))
    assert argv == ["--epochs", "3"]
