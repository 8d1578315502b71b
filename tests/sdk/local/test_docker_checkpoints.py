"""Docker local mode's checkpoint mount, against the real SDK's volume builder.

The jobs themselves run in tests/docker/test_local_mode.py (Docker needed).
"""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace

import pytest
from sagemaker.local import image

from trcomp import LocalModeError, PyTorch
from trcomp.local.checkpoints import checkpoint_mount
from trcomp.local.docker import docker_view


def _volumes(tmp_path: Path) -> list[str]:
    """What the SDK mounts into one training container, as ``host:container`` maps."""
    data_dir = tmp_path / "sdk" / "data"
    data_dir.mkdir(parents=True, exist_ok=True)
    container = SimpleNamespace(container_root=str(tmp_path / "sdk"))
    output = {"S3OutputPath": f"file://{tmp_path / 'out'}"}
    volumes = image._SageMakerContainer._prepare_training_volumes(
        container, str(data_dir), [], output, {}
    )
    return [v.map for v in volumes]


def _estimator(tmp_path: Path, role: str, **kwargs: object) -> PyTorch:
    (tmp_path / "train.py").write_text("print('never runs')\n")
    return PyTorch(
        entry_point="train.py",
        source_dir=str(tmp_path),
        role=role,
        instance_type="local",
        instance_count=1,
        **kwargs,
    )


def test_file_uri_is_mounted_at_the_checkpoint_path_for_one_fit(tmp_path: Path, role: str) -> None:
    checkpoints = tmp_path / "ckpt"
    uri = f"file://{checkpoints}"
    estimator = _estimator(tmp_path, role, checkpoint_s3_uri=uri)
    before = _volumes(tmp_path)
    with checkpoint_mount(estimator.job_spec()) as mounted:
        assert mounted == checkpoints.resolve() and checkpoints.is_dir()
        assert _volumes(tmp_path) == [*before, f"{checkpoints.resolve()}:/opt/ml/checkpoints"]
    assert _volumes(tmp_path) == before
    assert estimator.checkpoint_s3_uri == uri


def test_checkpoint_local_path_is_the_mount_point(tmp_path: Path, role: str) -> None:
    estimator = _estimator(
        tmp_path,
        role,
        checkpoint_s3_uri=f"file://{tmp_path / 'ckpt'}",
        checkpoint_local_path="/opt/ml/my-checkpoints",
    )
    spec = estimator.job_spec()
    with checkpoint_mount(spec) as mounted:
        assert _volumes(tmp_path)[-1].endswith(":/opt/ml/my-checkpoints")
    assert estimator.checkpoint_local_path == "/opt/ml/my-checkpoints"
    # The container's compile caches follow the checkpoint path; the SDK, which refuses
    # both settings in local mode, sees neither.
    view = docker_view(spec, mounted, "file:///out/job/output")
    assert view.extra_environment == {
        "TRCOMP_GIVE_BACK_INPUTS": "1",
        "TRCOMP_CHECKPOINT_DIR": "/opt/ml/my-checkpoints",
        "TRCOMP_CHECKPOINT_URI": (tmp_path / "ckpt").resolve().as_uri(),
    }
    assert view.checkpoint_s3_uri is None and view.checkpoint_local_path is None


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"checkpoint_s3_uri": "s3://bucket/ckpt"}, "does not sync checkpoints with S3"),
        ({"checkpoint_local_path": "/opt/ml/c"}, "needs checkpoint_s3_uri"),
    ],
)
def test_settings_local_mode_cannot_honour_fail_before_docker(
    tmp_path: Path, role: str, kwargs: dict[str, str], message: str
) -> None:
    estimator = _estimator(tmp_path, role, **kwargs)
    original = image._SageMakerContainer._prepare_training_volumes
    # fit() refuses before it looks for the Docker engine, so this runs without one.
    with pytest.raises(LocalModeError, match=message):
        estimator.fit()
    assert image._SageMakerContainer._prepare_training_volumes is original
