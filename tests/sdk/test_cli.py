"""The ``trcomp`` command line: help everywhere, image commands, run and doctor.

Commands that talk to AWS run against moto in server mode (see tests/helpers/aws.py);
``image build`` and ``image push`` are checked up to the commands they would run.
"""

from __future__ import annotations

import argparse
import base64
import json
import shutil
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import boto3
import pytest

from tests.helpers.aws import (
    ACCOUNT,
    FAKE_CREDENTIALS,
    REGION,
    MotoServer,
    aws_environment,
    moto_server,
)
from tests.helpers.commands import path_of_scripts
from trcomp import docker_cli
from trcomp.cli import build_parser, main
from trcomp.cli.run import LOCAL_ROLE, estimator_spec
from trcomp.config import TrainingCompilerConfig
from trcomp.doctor import Check, check_devices, check_docker, failures
from trcomp.image.build import build_commands
from trcomp.image.push import ecr_login, push_commands
from trcomp.image.uris import image_tag

REPO_ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def moto(tmp_path_factory: pytest.TempPathFactory) -> Iterator[MotoServer]:
    tmp = tmp_path_factory.mktemp("moto-cli")
    with moto_server(tmp) as server, aws_environment(server.url):
        yield server


@pytest.fixture(scope="module")
def role(moto: MotoServer) -> str:
    return str(
        boto3.client("iam").create_role(RoleName="trcomp-cli", AssumeRolePolicyDocument="{}")[
            "Role"
        ]["Arn"]
    )


@pytest.fixture
def script(tmp_path: Path) -> Path:
    src = tmp_path / "project"
    src.mkdir()
    (src / "train.py").write_text("print('hello')\n")
    return src / "train.py"


# -- the parser ------------------------------------------------------------------------


def _walk(parser: argparse.ArgumentParser, path: tuple[str, ...] = ()) -> Iterator[tuple[str, ...]]:
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            helps = {a.dest: a.help for a in action._choices_actions}
            for name, sub in action.choices.items():
                assert helps.get(name), f"`trcomp {' '.join((*path, name))}` has no help line"
                assert sub.description, f"`trcomp {' '.join((*path, name))}` has no description"
                yield (*path, name)
                yield from _walk(sub, (*path, name))
        elif action.option_strings and action.dest != "help":
            assert action.help, f"option {action.option_strings} of {path} has no help"


def test_every_command_has_help(capsys: pytest.CaptureFixture[str]) -> None:
    commands = list(_walk(build_parser()))
    expected = {
        ("doctor",),
        ("image",),
        ("image", "uri"),
        ("image", "build"),
        ("image", "push"),
        ("run",),
    }
    assert expected <= set(commands)
    for command in commands:
        with pytest.raises(SystemExit) as exit_:
            main([*command, "--help"])
        assert exit_.value.code == 0
        assert f"usage: trcomp {' '.join(command)}" in capsys.readouterr().out


def test_console_script_is_installed() -> None:
    script = Path(sys.executable).parent / "trcomp"
    if not script.exists():
        pytest.skip("trcomp is not installed as a console script in this environment")
    out = subprocess.run([str(script), "--version"], capture_output=True, text=True, check=True)
    assert out.stdout.startswith("trcomp ")


# -- image -------------------------------------------------------------------------------


def test_image_uri_explicit(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("TRCOMP_IMAGE_URI", raising=False)
    args = [
        "image",
        "uri",
        "--region",
        "eu-west-1",
        "--account",
        "210987654321",
        "--device",
        "cpu",
        "--framework-version",
        "2.9.0",
    ]
    assert main(args) == 0
    expected = (
        f"210987654321.dkr.ecr.eu-west-1.amazonaws.com/trcomp-training:{image_tag('2.9.0', 'cpu')}"
    )
    assert capsys.readouterr().out.strip() == expected


def test_image_uri_asks_sts_for_the_account(
    moto: MotoServer, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["image", "uri"]) == 0
    assert capsys.readouterr().out.startswith(f"{ACCOUNT}.dkr.ecr.{REGION}.amazonaws.com/")


def test_image_build_commands() -> None:
    commands = build_commands(REPO_ROOT, None, offline=True, context="/ctx")
    assert commands[0] == [
        "bash",
        str(REPO_ROOT / "container" / "build_base.sh"),
        "trcomp-base:bookworm",
    ]
    assert commands[1] == [
        "docker",
        "build",
        "--network",
        "host",
        "--force-rm",
        "-t",
        "trcomp-training:latest",
        "-f",
        "/ctx/Dockerfile",
        "--build-arg",
        "BASE_IMAGE=trcomp-base:bookworm",
        "/ctx",
    ]
    [only] = build_commands(REPO_ROOT, "pytorch/pytorch:custom", context="/ctx")
    assert "BASE_IMAGE=pytorch/pytorch:custom" in only


def test_image_build_dry_run(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["image", "build", "--dry-run", "--base-image", "nvcr.io/nvidia/pytorch:x"]) == 0
    out = capsys.readouterr().out
    assert "docker build --network host --force-rm -t trcomp-training:latest" in out
    assert "--build-arg BASE_IMAGE=nvcr.io/nvidia/pytorch:x" in out


def test_ecr_login_against_moto(moto: MotoServer) -> None:
    login = ecr_login(boto3.Session(), REGION, ACCOUNT)
    assert login.registry == f"{ACCOUNT}.dkr.ecr.{REGION}.amazonaws.com"
    assert login.password and login.password not in repr(login)
    repos = boto3.client("ecr").describe_repositories()["repositories"]
    assert [r["repositoryName"] for r in repos] == ["trcomp-training"]
    commands = push_commands(login.registry, "trcomp-training:latest", "REMOTE")
    assert commands[0][-2:] == ["--password-stdin", login.registry]
    assert all(login.password not in part for command in commands for part in command)


def test_image_push_dry_run(moto: MotoServer, capsys: pytest.CaptureFixture[str]) -> None:
    token = boto3.client("ecr").get_authorization_token()["authorizationData"][0]
    password = base64.b64decode(token["authorizationToken"]).decode().partition(":")[2]
    assert main(["image", "push", "--region", REGION, "--dry-run"]) == 0
    out = capsys.readouterr().out
    remote = f"{ACCOUNT}.dkr.ecr.{REGION}.amazonaws.com/trcomp-training:{image_tag()}"
    registry = f"{ACCOUNT}.dkr.ecr.{REGION}.amazonaws.com"
    assert f"docker login --username AWS --password-stdin {registry}" in out
    assert f"docker tag trcomp-training:latest {remote}" in out
    assert f"docker push {remote}" in out
    assert password not in out


# -- run ---------------------------------------------------------------------------------


def _run_args(*argv: str) -> argparse.Namespace:
    return build_parser().parse_args(["run", *argv])


def test_run_spec(script: Path) -> None:
    spec = estimator_spec(
        _run_args(
            str(script),
            "--compiler",
            "off",
            "--hp",
            "lr=0.1",
            "--hp",
            "name=bert",
            "--hp",
            "tags=[1,2]",
        )
    )
    assert spec.kwargs["entry_point"] == "train.py"
    assert spec.kwargs["source_dir"] == str(script.parent)
    assert spec.kwargs["role"] == LOCAL_ROLE
    assert spec.kwargs["instance_type"] == "local_process"
    assert spec.kwargs["hyperparameters"] == {"lr": 0.1, "name": "bert", "tags": [1, 2]}
    assert spec.kwargs["compiler_config"] == TrainingCompilerConfig(enabled=False)
    assert spec.inputs is None
    nested = estimator_spec(_run_args(str(script), "--source-dir", str(script.parents[1])))
    assert nested.kwargs["entry_point"] == "project/train.py"


def test_run_remote_needs_a_role(
    script: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("TRCOMP_ROLE", raising=False)
    assert main(["run", str(script), "--instance-type", "ml.g5.xlarge"]) == 1
    assert "needs an execution role: pass --role" in capsys.readouterr().err


def test_run_submits_to_sagemaker(
    moto: MotoServer, role: str, script: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    boto3.client("s3").create_bucket(
        Bucket="cli-data", CreateBucketConfiguration={"LocationConstraint": REGION}
    )
    argv = [
        "run",
        str(script),
        "--instance-type",
        "ml.g5.2xlarge",
        "--instance-count",
        "2",
        "--compiler",
        "inductor",
        "--hp",
        "epochs=3",
        "--input",
        "train=s3://cli-data/train",
        "--role",
        role,
        "--output-path",
        "s3://cli-data/out",
        "--base-job-name",
        "cli",
        "--no-wait",
    ]
    assert main(argv) == 0
    out = capsys.readouterr().out
    [request] = moto.json_requests("CreateTrainingJob")
    name = request["TrainingJobName"]
    assert f"submitted {name} (2 x ml.g5.2xlarge)" in out
    hps = request["HyperParameters"]
    assert hps["epochs"] == "3" and json.loads(hps["sagemaker_program"]) == "train.py"
    config = TrainingCompilerConfig.from_hyperparameters(hps)
    assert config == TrainingCompilerConfig(backend="inductor")
    assert request["RoleArn"] == role
    assert request["ResourceConfig"]["InstanceCount"] == 2
    assert request["OutputDataConfig"]["S3OutputPath"] == "s3://cli-data/out"
    assert request["InputDataConfig"][0]["DataSource"]["S3DataSource"]["S3Uri"] == (
        "s3://cli-data/train"
    )
    assert request["CheckpointConfig"]["S3Uri"].endswith("/trcomp-checkpoints/cli/train/")
    assert f"  checkpoint: {request['CheckpointConfig']['S3Uri']}" in out
    assert all(secret not in json.dumps(request) + out for secret in FAKE_CREDENTIALS.values())


# -- doctor ------------------------------------------------------------------------------


def test_doctor_failures_depend_on_mode() -> None:
    checks = [
        Check("torch", False, "not installed", "pip install torch", frozenset({"process"})),
        Check("docker engine", True, "server 27", needed_for=frozenset({"docker"})),
        Check("transformers", False, "not installed", "pip install", frozenset()),
    ]
    assert failures(checks) == []
    assert [c.name for c in failures(checks, ["process"])] == ["torch"]
    assert failures(checks, ["docker", "remote"]) == []


def test_doctor_docker_checks_ask_the_cli_like_preflight(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """An engine that answers, no compose v2, docker-compose 1.29.2, no image."""
    docker = (
        'case "$1" in info) echo 27.1 ;; '
        "compose) echo \"docker: 'compose' is not a docker command.\" >&2; exit 1 ;; "
        'image) echo "Error: No such image: $5" >&2; exit 1 ;; esac'
    )
    monkeypatch.setenv(
        "PATH", path_of_scripts(tmp_path, docker=docker, **{"docker-compose": "echo 1.29.2"})
    )
    checks = {c.name: c for c in check_docker("trcomp-training:latest")}
    assert checks["docker engine"].ok and checks["docker engine"].detail == "server 27.1"
    assert checks["docker compose"].detail == "docker-compose 1.29.2"
    assert docker_cli.compose_command() == ["docker-compose"]  # what preflight sees too
    assert not checks["local image"].ok and "trcomp image build" in checks["local image"].fix


def test_doctor_without_docker_or_compose(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PATH", path_of_scripts(tmp_path))
    checks = {c.name: c for c in check_docker("trcomp-training:latest")}
    assert not checks["docker engine"].ok and "not found" in checks["docker engine"].detail
    assert not checks["docker compose"].ok
    assert "local image" not in checks  # no engine to ask


def test_doctor_without_the_container_runtime(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """An environment without trcomp_container: a finding, not a crash."""
    import venv

    bare = tmp_path / "bare"
    venv.create(bare, with_pip=False)
    monkeypatch.setattr(sys, "executable", str(bare / "bin" / "python"))
    [devices] = check_devices()
    assert not devices.ok and devices.detail == "container runtime not installed here"
    assert [c.name for c in failures([devices], ["process"])] == ["devices"]
    assert failures([devices], ["docker"]) == []


def test_doctor_does_not_import_the_container_package() -> None:
    code = (
        "import sys; from trcomp.doctor import check_devices; checks = check_devices(); "
        "assert checks[0].ok, checks; "
        "assert not [m for m in sys.modules if m.startswith('trcomp_container')]; "
        "print(checks[-1].detail)"
    )
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=120, check=True
    )
    assert done.stdout.startswith("auto -> inductor")


def test_doctor_for_remote_against_moto(
    moto: MotoServer, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["doctor", "--for", "remote", "--json"]) == 0
    report = json.loads(capsys.readouterr().out)
    checks = {c["name"]: c for c in report["checks"]}
    assert report["ok"] is True
    assert checks["aws identity"]["detail"].startswith(f"account {ACCOUNT}")
    assert checks["backend on GPU instance"]["detail"].startswith("auto -> inductor")


def test_doctor_fails_with_the_fix(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    for key in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN", "AWS_PROFILE"):
        monkeypatch.delenv(key, raising=False)
    monkeypatch.setenv("AWS_SHARED_CREDENTIALS_FILE", str(tmp_path / "none"))
    monkeypatch.setenv("AWS_CONFIG_FILE", str(tmp_path / "none"))
    monkeypatch.setenv("AWS_EC2_METADATA_DISABLED", "true")
    monkeypatch.setenv("TRCOMP_LOCAL_IMAGE", "trcomp-no-such-image:0")
    monkeypatch.setattr(boto3, "DEFAULT_SESSION", None)
    has_cli = shutil.which("docker") is not None
    modes = ["--for", "remote"] + (["--for", "docker"] if has_cli else [])
    assert main(["doctor", *modes]) == 1
    out = capsys.readouterr().out
    assert "FAIL  aws credentials" in out
    assert "fix: run `aws configure`" in out
    if has_cli and _docker_engine_up():
        assert "trcomp-no-such-image:0 not built" in out and "fix: trcomp image build" in out
    elif has_cli:
        # The CLI is installed but no engine answers (CI runs make test before
        # it starts dockerd): the engine check fails and names the fix.
        assert "FAIL  docker engine" in out and "make docker-engine" in out
        assert "local image" not in out


def _docker_engine_up() -> bool:
    probe = subprocess.run(
        ["docker", "info", "--format", "{{.ServerVersion}}"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    return probe.returncode == 0 and bool(probe.stdout.strip())


def test_run_in_process_mode(
    tmp_path: Path, script: Path, capfd: pytest.CaptureFixture[str]
) -> None:
    script.write_text("import sys\nprint('argv', sys.argv[1:])\n")
    out_dir = tmp_path / "out"
    argv = [
        "run",
        str(script),
        "--compiler",
        "off",
        "--hp",
        "epochs=2",
        "--output-path",
        f"file://{out_dir}",
    ]
    assert main(argv) == 0
    out = capfd.readouterr().out
    assert "argv ['--epochs', '2']" in out
    assert "trcomp run: job trcomp-training-" in out and "finished (local_process)" in out
    assert len(list(out_dir.glob("trcomp-training-*/output/model.tar.gz"))) == 1
