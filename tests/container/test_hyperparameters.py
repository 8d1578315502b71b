"""The entrypoint reads a job's hyperparameters alike whether SDK v2 or v3 stored them.

v2 JSON-encodes every value; v3 stores a str unchanged and JSON-encodes the
rest. The jobs run the real training toolkit's ``train`` on a temporary /opt/ml tree.
"""

from __future__ import annotations

import json
from typing import Any

import pytest

from tests.helpers import jobs
from trcomp.config import TrainingCompilerConfig
from trcomp.local.tree import lay_out_tree
from trcomp_container.hyperparameters import decode_value

# What the user wrote, as Python values.
USER = {"lr": "1e-3", "name": "bert", "steps": 20, "flag": True, "layers": [1, 2], "pad": "007"}
CONFIG = TrainingCompilerConfig(enabled=False, backend="inductor", debug=True)


def stored_by_v2(values: dict[str, Any]) -> dict[str, str]:
    return {key: json.dumps(value) for key, value in values.items()}


def stored_by_v3(values: dict[str, Any]) -> dict[str, str]:
    return {key: v if isinstance(v, str) else json.dumps(v) for key, v in values.items()}


@pytest.mark.parametrize(
    ("stored", "value"),
    [
        ('"bert"', "bert"),  # v2 str
        ("bert", "bert"),  # v3 str
        ("1e-3", "1e-3"),  # v3 str that JSON would turn into 0.001
        ("0.001", 0.001),  # v2 or v3 float
        ("20", 20),
        ("true", True),
        ("[1, 2]", [1, 2]),
        ('{"a": 1}', {"a": 1}),
        ("007", "007"),  # not JSON at all
        ("[1,2]", "[1,2]"),  # v3 str: json.dumps would write "[1, 2]"
        (3, 3),  # already decoded
    ],
)
def test_decode_value_keeps_what_is_not_canonical_json(stored: Any, value: Any) -> None:
    assert decode_value(stored) == value


def _job(tmp_path, encode):
    # The compiler's values are JSON strings already: both SDKs store them as they are.
    stored = {
        **encode({**USER, "sagemaker_program": "probe_env.py"}),
        **CONFIG.to_hyperparameters(),
    }
    lay_out_tree(
        tmp_path,
        hyperparameters=stored,
        source_dir=jobs.SCRIPTS,
        entry_point="probe_env.py",
        encoded=True,
    )
    return jobs.run_train(tmp_path)


@pytest.mark.slow
def test_v2_and_v3_jobs_reach_the_script_alike(tmp_path_factory) -> None:
    runs = {
        "v2": _job(tmp_path_factory.mktemp("v2"), stored_by_v2),
        "v3": _job(tmp_path_factory.mktemp("v3"), stored_by_v3),
    }
    seen = {}
    for name, run in runs.items():
        assert run.returncode == 0, run.output
        seen[name] = run.model_json("seen.json")
        summary = run.summary
        assert (summary["requested_backend"], summary["debug"]) == ("inductor", True)
    assert seen["v3"]["argv"] == seen["v2"]["argv"]
    # The toolkit's own decoding would have passed 0.001 and 7... for the v3 strings.
    assert seen["v3"]["argv"] == [
        "--flag",
        "True",
        "--layers",
        "[1, 2]",
        "--lr",
        "1e-3",
        "--name",
        "bert",
        "--pad",
        "007",
        "--steps",
        "20",
    ]
    assert seen["v3"]["enabled"] is False and seen["v2"]["enabled"] is False
