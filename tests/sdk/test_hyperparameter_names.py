"""Hyperparameter names the training toolkit cannot pass to the script, refused at ``fit()``.

The toolkit gives the script every hyperparameter as ``--name value`` and as the
environment variable ``SM_HP_<NAME>``; a name holding ``=`` cannot be an environment
variable's, and failed the job before the script started (exit 70, "trcomp internal
error", compiler on or off). A real process-mode job shows the names that pass; a moto
server shows a remote job with a refused name is never submitted.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest

import trcomp
from tests.helpers.aws import MotoServer, aws_environment, create_sagemaker_role, moto_server
from trcomp import HyperparameterLimitError
from trcomp.contract.limits import check_limits, unpassable

pytestmark = pytest.mark.slow

SCRIPT = """
import json, os, pathlib, sys
env = {k: v for k, v in os.environ.items() if k.startswith("SM_HP_")}
seen = {"argv": sys.argv[1:], "env": env}
pathlib.Path(os.environ["SM_MODEL_DIR"], "seen.json").write_text(json.dumps(seen))
"""


def _estimator(tmp: Path, role: str, instance_type: str, compiler: bool, **kwargs):
    (tmp / "src").mkdir(exist_ok=True)
    (tmp / "src" / "train.py").write_text(SCRIPT)
    config = trcomp.TrainingCompilerConfig(backend="inductor", enabled=compiler)
    return trcomp.PyTorch(
        entry_point="train.py", source_dir=str(tmp / "src"), role=role,
        instance_type=instance_type, instance_count=1, compiler_config=config, **kwargs,
    )  # fmt: skip


@pytest.mark.parametrize("compiler", [False, True])
@pytest.mark.parametrize("name", ["lr=0.1", "=", "opt=adam=1", "nul\0name"])
def test_a_name_the_toolkit_cannot_pass_is_refused_before_a_process_job(
    role, tmp_path, name, compiler
):
    out = tmp_path / "out"
    estimator = _estimator(
        tmp_path, role, "local_process", compiler,
        hyperparameters={"epochs": 1, name: 1}, output_path=f"file://{out}",
    )  # fmt: skip
    says = "no environment variable's name can hold that"
    with pytest.raises(HyperparameterLimitError, match=says) as caught:
        estimator.fit(job_name="bad-name")
    assert repr(name) in str(caught.value) and "Rename it" in str(caught.value)
    assert not out.exists()  # nothing was created


@pytest.fixture(scope="module")
def moto(tmp_path_factory: pytest.TempPathFactory) -> Iterator[MotoServer]:
    with moto_server(tmp_path_factory.mktemp("moto")) as server, aws_environment(server.url):
        yield server


@pytest.fixture(scope="module")
def remote_role(moto: MotoServer) -> str:
    return create_sagemaker_role("trcomp-hp-names")


@pytest.mark.parametrize("compiler", [False, True])
def test_a_remote_job_with_such_a_name_is_never_submitted(moto, remote_role, tmp_path, compiler):
    role = remote_role
    before = len(moto.json_requests("CreateTrainingJob"))
    puts = len([r for r in moto.requests() if r["method"] == "PUT"])
    estimator = _estimator(
        tmp_path, role, "ml.g5.xlarge", compiler, hyperparameters={"warmup=steps": 10}
    )
    with pytest.raises(HyperparameterLimitError, match="'warmup=steps'"):
        estimator.fit(wait=False)
    assert len(moto.json_requests("CreateTrainingJob")) == before
    assert len([r for r in moto.requests() if r["method"] == "PUT"]) == puts  # no upload


# Names SageMaker and the toolkit pass as they are: never refused.
PASSING = ["model.lr", "warm up", "dash-name", "Überlauf", "-x", "a/b:c"]


def test_names_the_toolkit_passes_reach_the_script(role, tmp_path):
    out = tmp_path / "out"
    hyperparameters = {name: i for i, name in enumerate(PASSING)}
    estimator = _estimator(
        tmp_path, role, "local_process", False,
        hyperparameters=hyperparameters, output_path=f"file://{out}",
    )  # fmt: skip
    estimator.fit(job_name="odd-names")
    import tarfile

    with tarfile.open(out / "odd-names" / "output" / "model.tar.gz") as tar:
        seen = json.load(tar.extractfile("seen.json"))  # type: ignore[arg-type]
    for i, name in enumerate(PASSING):
        assert f"--{name}" in seen["argv"], seen
        assert seen["env"][f"SM_HP_{name.upper()}"] == str(i)


def test_the_rule_is_the_environments():
    assert [unpassable(name) for name in PASSING] == [""] * len(PASSING)
    assert unpassable("a=b") == "holds '='" and "NUL" in unpassable("a\0b")
    assert "surrogate" in unpassable("a\ud800")
    check_limits({name: "1" for name in PASSING})
