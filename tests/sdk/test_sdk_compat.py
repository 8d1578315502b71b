"""trcomp._sdk_compat against the installed SageMaker SDK: each private use still works.

Run on the newest SDK v2 (``make test``) and the lowest pyproject allows
(``make test-sdk-lowest``). A failure here means the SDK changed underneath one
of the functions in trcomp/_sdk_compat.py.
"""

from __future__ import annotations

import concurrent.futures
import re
import threading
from pathlib import Path

import pytest
import sagemaker.utils
from sagemaker.local import LocalSession
from sagemaker.local.image import _SageMakerContainer

from trcomp import PyTorch, _sdk_compat
from trcomp.session import TELEMETRY_OPT_OUT, local_session

ROOT = Path(__file__).resolve().parents[2]
# The private SDK names trcomp._sdk_compat (v2) and trcomp.v3._sdk_compat (v3) use;
# nothing else in trcomp may name them.
PRIVATE = re.compile(
    r"\b(_current_job_name|_get_or_create_name|_SageMakerContainer|_prepare_training_volumes"
    r"|_Volume|_default_bucket\w*|validate_sagemaker_config|_create_training_job_args)\b"
)
# Any other attribute of a sagemaker module that starts with an underscore.
SDK_PRIVATE_ATTR = re.compile(r"\bsagemaker(\.\w+)*\._[a-zA-Z]\w*")


def _sources() -> list[Path]:
    return [
        path
        for package in ("sdk/trcomp", "container/trcomp_container")
        for path in (ROOT / package).rglob("*.py")
        if path.name != "_sdk_compat.py"
    ]


def test_no_private_sdk_names_outside_sdk_compat() -> None:
    found = []
    for path in _sources():
        for number, line in enumerate(path.read_text().splitlines(), 1):
            if PRIVATE.search(line) or SDK_PRIVATE_ATTR.search(line):
                found.append(f"{path.relative_to(ROOT)}:{number}: {line.strip()}")
    assert not found, "private SageMaker SDK names outside _sdk_compat.py:\n" + "\n".join(found)


def test_sdk_hooks_are_still_called_by_the_sdk() -> None:
    import sagemaker.estimator
    import sagemaker.pytorch

    assert "_to_hyperparameter_dict" in sagemaker.pytorch.PyTorch.hyperparameters.__code__.co_names
    attach = sagemaker.estimator.EstimatorBase._attach.__func__.__code__.co_names
    assert "_prepare_init_params_from_job_description" in attach


def _estimator(offline_session, role, **kwargs) -> PyTorch:
    return PyTorch(
        entry_point="train.py",
        role=role,
        instance_type="ml.g5.xlarge",
        instance_count=1,
        sagemaker_session=offline_session,
        **kwargs,
    )


def test_job_names(offline_session, role) -> None:
    estimator = _estimator(offline_session, role, base_job_name="compat", output_path="s3://b/o")
    assert _sdk_compat.current_job_name(estimator) is None
    name = _sdk_compat.new_job_name(estimator)
    assert name.startswith("compat-")
    assert _sdk_compat.new_job_name(estimator, "given") == "given"
    _sdk_compat.set_current_job_name(estimator, name)
    assert _sdk_compat.current_job_name(estimator) == name
    # The SDK reads the same attribute: model_data of a job that ran outside it.
    assert estimator.model_data == f"s3://b/o/{name}/output/model.tar.gz"


def test_default_bucket_attributes_exist(offline_session) -> None:
    # default_bucket() itself is exercised against moto in test_remote.py.
    for name in ("_default_bucket", "_default_bucket_name_override", "_default_bucket_set_by_sdk"):
        assert hasattr(offline_session, name), name
    import inspect

    import sagemaker.session

    source = inspect.getsource(sagemaker.session.Session)
    assert "self._default_bucket_set_by_sdk" in source  # the owner check reads it


def test_extra_training_volume(tmp_path: Path) -> None:
    session = local_session()
    assert isinstance(session, LocalSession)
    container = _SageMakerContainer("local", 1, "trcomp-training:latest", session)
    container.container_root = str(tmp_path / "root")
    data_dir = tmp_path / "data"
    data_dir.mkdir()
    output = {"S3OutputPath": f"file://{tmp_path}/out"}

    def volumes() -> list[str]:
        return [v.map for v in container._prepare_training_volumes(str(data_dir), [], output, {})]

    before = volumes()
    with _sdk_compat.extra_training_volume(str(tmp_path / "ckpt"), "/opt/ml/checkpoints"):
        inside = volumes()
    assert inside == [*before, f"{tmp_path / 'ckpt'}:/opt/ml/checkpoints"]
    assert volumes() == before


def test_extra_training_volumes_of_two_threads_stay_apart(tmp_path: Path) -> None:
    """Two Docker-mode fit() calls at once: each job's containers get its own mount only."""
    session = local_session()
    data_dir = tmp_path / "data"
    data_dir.mkdir()
    output = {"S3OutputPath": f"file://{tmp_path}/out"}
    sdk_method = _SageMakerContainer._prepare_training_volumes
    both_inside = threading.Barrier(2)
    both_prepared = threading.Barrier(2)

    def job(tag: str) -> list[str]:
        container = _SageMakerContainer("local", 1, "trcomp-training:latest", session)
        container.container_root = str(tmp_path / f"root-{tag}")
        with _sdk_compat.extra_training_volume(str(tmp_path / tag), "/opt/ml/checkpoints"):
            both_inside.wait(timeout=30)  # the other job is inside its block too
            prepared = container._prepare_training_volumes(str(data_dir), [], output, {})
            both_prepared.wait(timeout=30)
        return [v.map for v in prepared if v.map.endswith(":/opt/ml/checkpoints")]

    with concurrent.futures.ThreadPoolExecutor(2) as pool:
        first, second = pool.map(job, ["first", "second"])
    assert first == [f"{tmp_path / 'first'}:/opt/ml/checkpoints"]
    assert second == [f"{tmp_path / 'second'}:/opt/ml/checkpoints"]
    assert _SageMakerContainer._prepare_training_volumes is sdk_method


def test_validate_config_once(monkeypatch: pytest.MonkeyPatch) -> None:
    original = sagemaker.utils.validate_sagemaker_config
    monkeypatch.setattr(sagemaker.utils, "validate_sagemaker_config", original)
    # The SDK's config lookups call the module's function (so replacing it takes effect).
    names = sagemaker.utils.get_sagemaker_config_value.__code__.co_names
    assert "validate_sagemaker_config" in names
    calls: list[object] = []

    def counting(config=None):
        calls.append(config)
        return original(config)

    monkeypatch.setattr(sagemaker.utils, "validate_sagemaker_config", counting)
    _sdk_compat.validate_config_once(TELEMETRY_OPT_OUT)
    _sdk_compat.validate_config_once(TELEMETRY_OPT_OUT)
    assert calls == [TELEMETRY_OPT_OUT]  # validated for real once
    session = local_session()
    sagemaker.utils.get_sagemaker_config_value(session, "SageMaker.PythonSDK")
    assert calls == [TELEMETRY_OPT_OUT]  # then skipped for that object
    with pytest.raises(Exception, match="Additional properties are not allowed"):
        sagemaker.utils.get_sagemaker_config_value(None, "x", {"SchemaVersion": "1.0", "Bad": 1})
    assert len(calls) == 2  # any other config is still validated
