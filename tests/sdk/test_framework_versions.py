"""The framework-version matrix: torch 2.9 (inductor, torch-xla, jax engine) and 2.14 (inductor).

Real estimators on an offline SageMaker session; the refusals come from the
constructors, before anything is uploaded.
"""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

import trcomp
from trcomp import TrainingCompilerConfig, UnsupportedJobError
from trcomp.image.build import build_commands
from trcomp.image.uris import (
    DEFAULT_FRAMEWORK_VERSION,
    IMAGES,
    LOCAL_IMAGE,
    image_for,
    image_tag,
    local_image_uri,
    versions_from_image,
)
from trcomp.local.process import check_no_tpu

NEW = next(image for image in IMAGES if image.torch.startswith("2.14."))
ACCOUNT = "444455556666"
REPO_ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture
def session(offline_session, monkeypatch):
    monkeypatch.setattr(offline_session, "account_id", lambda: ACCOUNT)
    return offline_session


def _pytorch(session, role, **kwargs):
    kwargs.setdefault("instance_type", "ml.g5.2xlarge")
    return trcomp.PyTorch(
        entry_point="train.py", role=role, instance_count=1, sagemaker_session=session, **kwargs
    )


def test_the_table() -> None:
    default = IMAGES[0]
    assert default.torch == DEFAULT_FRAMEWORK_VERSION
    assert default.engines == ("inductor", "torch_xla", "jax") and default.runs_xla
    assert NEW.engines == ("inductor",) and not NEW.runs_xla
    assert image_for("2.14") == image_for(NEW.torch) == NEW
    assert image_for(None) == image_for("2.9") == default
    assert image_for("2.13") is None


@pytest.mark.parametrize("version", [NEW.short, NEW.torch])
def test_2_14_is_accepted_in_both_spellings_with_its_own_image(session, role, version) -> None:
    est = _pytorch(
        session, role, framework_version=version, compiler_config=TrainingCompilerConfig()
    )
    image = est.training_image_uri()
    assert image == f"{ACCOUNT}.dkr.ecr.eu-west-1.amazonaws.com/trcomp-training:" + image_tag(
        NEW.torch, "gpu"
    )
    assert versions_from_image(image) == NEW
    assert est.job_spec().framework_version == version


def test_the_default_stays_2_9(session, role) -> None:
    # An old backend="xla" config stays valid on the default version (jax engine on GPUs).
    with pytest.warns(trcomp.CompilerConfigWarning, match="jax engine"):
        est = _pytorch(session, role, compiler_config=TrainingCompilerConfig(backend="xla"))
    assert est.framework_version == DEFAULT_FRAMEWORK_VERSION
    assert est.training_image_uri().endswith(image_tag(DEFAULT_FRAMEWORK_VERSION, "gpu"))


def test_local_tags_per_version(role, monkeypatch) -> None:
    monkeypatch.delenv("TRCOMP_LOCAL_IMAGE", raising=False)
    assert local_image_uri() == local_image_uri("2.9") == LOCAL_IMAGE == "trcomp-training:latest"
    assert local_image_uri("2.14") == f"trcomp-training:torch{NEW.torch}"
    est = trcomp.PyTorch(
        entry_point="t.py", role=role, instance_type="local", instance_count=1,
        framework_version="2.14",
    )  # fmt: skip
    assert est.training_image_uri() == f"trcomp-training:torch{NEW.torch}"
    monkeypatch.setenv("TRCOMP_LOCAL_IMAGE", "mine:1")
    assert local_image_uri("2.14") == "mine:1"


@pytest.mark.parametrize("engine", ["auto", "torch_xla", "jax"])
def test_xla_on_2_14_is_refused_in_the_constructor_with_the_replacement(
    session, role, engine
) -> None:
    config = TrainingCompilerConfig(backend="xla", xla_engine=engine)
    with pytest.raises(UnsupportedJobError) as caught:
        _pytorch(session, role, framework_version="2.14", compiler_config=config)
    message = str(caught.value)
    assert "framework_version='2.9'" in message
    assert "backend='inductor'" in message and "'auto'" in message


@pytest.mark.parametrize("instance_type", ["ml.c5.xlarge", "local", "local_process"])
def test_xla_on_2_14_is_refused_on_cpu_and_locally_too(session, role, instance_type) -> None:
    with pytest.raises(UnsupportedJobError, match=r"framework_version='2.9'"):
        _pytorch(
            None if instance_type.startswith("local") else session,
            role,
            instance_type=instance_type,
            framework_version=NEW.torch,
            compiler_config=TrainingCompilerConfig(backend="xla"),
        )


def test_auto_and_inductor_on_2_14_are_accepted(session, role) -> None:
    for backend in ("auto", "inductor"):
        config = TrainingCompilerConfig(backend=backend)
        _pytorch(session, role, framework_version="2.14", compiler_config=config)


def test_xla_on_2_14_with_the_users_image_is_the_users_business(session, role) -> None:
    est = _pytorch(
        session,
        role,
        framework_version="2.14",
        image_uri="1.dkr.ecr.us-east-1.amazonaws.com/mine:xla",
        instance_type="ml.c5.xlarge",
        compiler_config=TrainingCompilerConfig(backend="xla"),
    )
    assert est.training_image_uri().endswith("mine:xla")


def test_huggingface_pairs_per_version(session, role) -> None:
    def hf(**kwargs):
        return trcomp.HuggingFace(
            entry_point="train.py",
            role=role,
            instance_count=1,
            instance_type="ml.g5.2xlarge",
            sagemaker_session=session,
            **kwargs,
        )

    old = hf()
    assert (old.pytorch_version, old.framework_version) == (IMAGES[0].torch, IMAGES[0].transformers)
    new = hf(pytorch_version="2.14")
    assert new.framework_version == NEW.transformers
    assert new.training_image_uri().endswith(image_tag(NEW.torch, "gpu"))
    assert hf(pytorch_version="2.14", transformers_version="5.3").framework_version == "5.3"
    with pytest.raises(UnsupportedJobError, match=r"pytorch_version='2.9'"):
        hf(pytorch_version="2.14", compiler_config=TrainingCompilerConfig(backend="xla"))


def test_plain_estimator_picks_the_version(session, role) -> None:
    def est(**kwargs):
        return trcomp.Estimator(
            role=role,
            instance_count=1,
            instance_type="ml.g5.2xlarge",
            sagemaker_session=session,
            **kwargs,
        )

    assert est().training_image_uri().endswith(image_tag(DEFAULT_FRAMEWORK_VERSION, "gpu"))
    assert est(framework_version="2.14").training_image_uri().endswith(image_tag(NEW.torch, "gpu"))
    with pytest.raises(UnsupportedJobError, match=r"framework_version='2.9'"):
        est(framework_version="2.14", compiler_config=TrainingCompilerConfig(backend="xla"))
    with pytest.raises(UnsupportedJobError, match=r"trcomp builds no image for torch 2.13"):
        est(framework_version="2.13")


def test_a_tpu_host_with_2_14_is_refused(role) -> None:
    est = _pytorch(
        None,
        role,
        instance_type="local_process",
        framework_version="2.14",
        compiler_config=TrainingCompilerConfig(),
    )
    spec = est.job_spec()
    check_no_tpu(spec, tpu_chips=0)
    with pytest.raises(trcomp.LocalModeError, match=r"framework_version='2.9'"):
        check_no_tpu(spec, tpu_chips=4)
    old = _pytorch(
        None, role, instance_type="local_process", compiler_config=TrainingCompilerConfig()
    )
    check_no_tpu(old.job_spec(), tpu_chips=4)


def test_image_build_per_version() -> None:
    [cmd] = build_commands(REPO_ROOT, None, tag="t:1", context="/ctx", versions=NEW)
    assert f"BASE_IMAGE={NEW.base_image}" in cmd
    [cmd] = build_commands(REPO_ROOT, None, tag="t:1", context="/ctx", versions=IMAGES[0])
    assert not any(part.startswith("BASE_IMAGE=") for part in cmd)  # the Dockerfile's default


def test_image_cli_takes_the_version(capsys) -> None:
    from trcomp.cli import main

    assert main(["image", "build", "--dry-run", "--framework-version", "2.14"]) == 0
    out = capsys.readouterr().out
    assert f"-t trcomp-training:torch{NEW.torch}" in out
    assert f"BASE_IMAGE={NEW.base_image}" in out
    with pytest.raises(SystemExit):
        main(["image", "build", "--dry-run", "--framework-version", "2.13"])
    assert "trcomp builds no image for torch 2.13" in capsys.readouterr().err


def test_container_requirements_per_version(tmp_path) -> None:
    from trcomp.image.build import container_requirements

    wheel = _wheel(tmp_path)
    old = container_requirements(wheel, jax_cuda=True, versions=IMAGES[0])
    assert "torch==2.9.0" in old and any(r.startswith("torch-xla") for r in old)
    assert any(r.startswith("jax-cuda12-plugin") for r in old)
    new = container_requirements(wheel, jax_cuda=True, versions=NEW)
    assert f"torch=={NEW.torch}" in new
    names = {r.split("=")[0].split(">")[0].split("[")[0] for r in new}
    assert not names & {"torch-xla", "jax", "jaxlib", "torchax", "jax-cuda12-plugin"}
    assert {"sagemaker-training", "redis"} <= names


def _wheel(tmp_path: Path) -> Path:
    """A wheel with the checkout's real metadata (pyproject's requirements), no code."""
    import zipfile

    from packaging.requirements import Requirement

    if sys.version_info >= (3, 11):
        import tomllib
    else:  # pragma: no cover
        pytest.skip("tomllib needs Python 3.11")
    project = tomllib.loads((REPO_ROOT / "pyproject.toml").read_text())["project"]
    lines = [f"Requires-Dist: {r}" for r in project["dependencies"]]
    for extra, reqs in project["optional-dependencies"].items():
        for r in reqs:
            req = Requirement(r)
            marker = (
                f'({req.marker}) and extra == "{extra}"' if req.marker else f'extra == "{extra}"'
            )
            req.marker = None
            lines.append(f"Requires-Dist: {req}; {marker}")
    wheel = tmp_path / "trcomp-0-py3-none-any.whl"
    with zipfile.ZipFile(wheel, "w") as zf:
        zf.writestr("trcomp-0.dist-info/METADATA", "\n".join(lines) + "\n")
    return wheel
