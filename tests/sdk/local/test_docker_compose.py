"""The compose file SageMaker's local mode writes, with the settings trcomp adds."""

from __future__ import annotations

from pathlib import Path

import pytest

from trcomp.local.docker import JOB_LABEL, _local_config, shm_size


def test_shm_size_is_half_the_memory() -> None:
    assert shm_size(64 * 2**30) == "32g"
    assert shm_size(2**30) == "1g"  # never below 1g
    assert int(shm_size()[:-1]) >= 1


@pytest.mark.parametrize("instance_type", ["local", "local_gpu"])
def test_local_mode_containers_get_a_large_dev_shm(
    tmp_path: Path, instance_type: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    from sagemaker.local.image import _SageMakerContainer

    from trcomp.session import local_session

    monkeypatch.setenv("AWS_DEFAULT_REGION", "eu-west-1")
    session = local_session()
    with _local_config(session, tmp_path, "job-1", 110.0):
        container = _SageMakerContainer(instance_type, 1, "trcomp-training:x", session)
        container.container_root = container._create_tmp_folder()  # what train() does first
        compose = container._generate_compose_file("train")
    (service,) = compose["services"].values()
    assert service["shm_size"] == shm_size()
    assert service["labels"] == {JOB_LABEL: "job-1"}


def test_a_shm_size_the_user_set_wins(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from trcomp.session import local_session

    monkeypatch.setenv("AWS_DEFAULT_REGION", "eu-west-1")
    session = local_session()
    session.config = {"local": {"container_config": {"shm_size": "3g"}}}
    with _local_config(session, tmp_path, "job-2", 110.0):
        assert session.config["local"]["container_config"]["shm_size"] == "3g"
