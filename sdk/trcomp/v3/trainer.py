"""``trcomp.v3.ModelTrainer``: SageMaker SDK v3's ``ModelTrainer`` with ``compiler_config=``.

It differs from v3's class in what the job runs: trcomp's image (by default)
with its own entrypoint, which turns the compiler on and launches the entry
script, instead of v3's driver script (see :mod:`trcomp.v3.adapter`).
"""

from __future__ import annotations

import contextlib
import logging
import os
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from pydantic import Field, PrivateAttr, ValidationError
from sagemaker.core.shapes import CheckpointConfig
from sagemaker.core.training.configs import InputData
from sagemaker.train.defaults import TrainDefaults
from sagemaker.train.model_trainer import Mode
from sagemaker.train.model_trainer import ModelTrainer as _V3ModelTrainer

from trcomp import docker_cli
from trcomp.checkpoints import checkpoint_environment, default_checkpoint_location
from trcomp.config import TrainingCompilerConfig
from trcomp.contract.errors import TrcompError, UnsupportedJobError
from trcomp.contract.proctree import outer_grace_s
from trcomp.credentials import check_no_credentials, credential_values
from trcomp.image.uris import (
    check_versions,
    device_for_instance,
    local_image_uri,
    remote_image_uri,
)
from trcomp.shared_cache_checks import check_shared_cache
from trcomp.v3 import adapter
from trcomp.v3._sdk_compat import BuildRequest, TrainingRequestHook
from trcomp.validation import validate_job

__all__ = ["LOCAL_CACHE_DIR", "ModelTrainer"]

logger = logging.getLogger("trcomp")

LOCAL_CACHE_DIR = "trcomp-checkpoints"
"""Local container mode: the checkpoint (and compile cache) dir under local_container_root."""


class ModelTrainer(TrainingRequestHook, _V3ModelTrainer):  # type: ignore[misc]
    """``sagemaker.train.ModelTrainer`` with ``compiler_config=`` and trcomp's image.

    ``source_code`` must name a ``source_dir`` and an ``entry_script``; the
    script runs under trcomp's entrypoint (under torchrun with
    ``distributed=Torchrun()``), which compiles it as ``compiler_config`` says.
    ``training_image`` defaults to trcomp's image for ``framework_version``:
    ``trcomp-training:latest`` for the default 2.9 (``trcomp-training:torch2.14.1``
    for 2.14; ``TRCOMP_LOCAL_IMAGE`` overrides both) in ``Mode.LOCAL_CONTAINER``,
    the image in your account's ECR registry (``TRCOMP_IMAGE_URI``) on SageMaker.
    See docs/v3.md.
    """

    compiler_config: TrainingCompilerConfig | None = Field(
        default=None,
        description="The training compiler switch; None runs the script eager in trcomp's "
        "image. Checked against compute and distributed when the trainer is built.",
    )
    framework_version: str | None = Field(
        default=None,
        description="The torch version of trcomp's image: '2.9' (2.9.0: inductor and both "
        "XLA engines) or '2.14' (2.14.1: inductor only); None is the default, 2.9.0. Picks "
        "the default training_image; with your own training_image it only describes it, as "
        "framework_version= with image_uri= does for the v2 estimators.",
    )

    _trcomp_image_is_default: bool = PrivateAttr(default=True)
    _trcomp_distribution: dict[str, Any] = PrivateAttr(default_factory=dict)

    def __init__(self, **data: Any) -> None:
        try:
            super().__init__(**data)
        except ValidationError as exc:
            # pydantic wraps a ValueError raised while validating; ours say what to do: unwrap.
            for error in exc.errors():
                cause = (error.get("ctx") or {}).get("error")
                if isinstance(cause, TrcompError):
                    raise cause from None
            raise

    def model_post_init(self, __context: Any) -> None:
        """Refuse what cannot run and check the compiler config, then v3's own defaults."""
        source = self.source_code
        if source is None:
            raise UnsupportedJobError(
                "trcomp.v3.ModelTrainer needs source_code=SourceCode(source_dir=..., "
                "entry_script=...): the image's entrypoint runs that script with the compiler on."
            )
        adapter.check_source_code(
            source_dir=_text(source.source_dir),
            entry_script=_text(source.entry_script),
            command=_text(source.command),
            requirements=_text(source.requirements),
            args=source.args,
        )
        if self.algorithm_name:
            raise UnsupportedJobError(
                f"algorithm_name={self.algorithm_name!r} runs a SageMaker algorithm, which "
                "trcomp cannot compile: drop algorithm_name (training_image defaults to trcomp's)."
            )
        distributed = self.distributed
        kind = type(distributed).__name__ if distributed is not None else None
        self._trcomp_distribution = adapter.distribution_for(
            kind, smp=bool(getattr(distributed, "smp", None))
        )
        self._trcomp_image_is_default = self.training_image is None
        # As in v2: with the user's own image the version is the user's business.
        torch = (
            check_versions(self.framework_version, None, image_argument="training_image").torch
            if self._trcomp_image_is_default
            else None
        )
        spec = adapter.job_spec(
            instance_types=self._instance_types(),
            distribution=self._trcomp_distribution,
            training_image=_text(self.training_image),
            image_is_default=self._trcomp_image_is_default,
            instance_count=self._instance_count(),
            compiler_config=self.compiler_config,
            environment=self.environment,
            framework_version=self.framework_version,
        )
        if self.compiler_config is not None:
            validate_job(self.compiler_config, spec)
        if "mpi" in self._trcomp_distribution:  # the compiler is off: still not launchable
            raise UnsupportedJobError(
                "distributed=MPI(...) is not supported by trcomp.v3.ModelTrainer: its entrypoint "
                "launches one process or torchrun. Use distributed=Torchrun()."
            )
        if torch is not None:
            self._assign(training_image=self._default_image(torch))
        super().model_post_init(__context)

    # -- what the job gets --------------------------------------------------------------

    def _assign(self, **values: Any) -> None:
        # Through setattr: v3's fields are validated on assignment, and mypy checks this
        # module in the v2 environment, where the base class is unknown.
        for name, value in values.items():
            setattr(self, name, value)

    def _is_local(self) -> bool:
        return bool(self.training_mode == Mode.LOCAL_CONTAINER)

    def _instance_types(self) -> tuple[str, ...]:
        compute = self.compute or TrainDefaults.get_compute(None)
        groups = getattr(compute, "instance_groups", None) or []
        types = [str(g.instance_type) for g in groups if getattr(g, "instance_type", None)]
        if not types and compute.instance_type:
            types = [str(compute.instance_type)]
        if self._is_local():
            types = [t for t in map(adapter.local_instance_type, types) if t]
        return tuple(types)

    def _instance_count(self) -> int:
        compute = self.compute or TrainDefaults.get_compute(None)
        groups = getattr(compute, "instance_groups", None) or []
        if groups:
            return sum(int(getattr(g, "instance_count", 1) or 1) for g in groups)
        count = getattr(compute, "instance_count", None)
        return count if isinstance(count, int) else 1

    def _default_image(self, torch: str) -> str:
        """trcomp's image for the full torch version ``torch`` (e.g. ``2.14.1``)."""
        if self._is_local():
            return local_image_uri(torch)
        session = TrainDefaults.get_sagemaker_session(self.sagemaker_session)
        self._assign(sagemaker_session=session)
        region = str(session.boto_region_name)
        # boto3's client honours AWS_ENDPOINT_URL and friends (v3's account_id() does not).
        account = session.boto_session.client("sts", region_name=region).get_caller_identity()
        types = self._instance_types()
        device = device_for_instance(types[0] if types else None)
        return remote_image_uri(region, str(account["Account"]), torch, device)

    def _cache_on(self) -> bool:
        config = self.compiler_config
        return config is not None and config.enabled and config.cache

    def trcomp_hyperparameters(self) -> dict[str, Any]:
        """The job's hyperparameters: the user's, then the entrypoint's and the compiler's."""
        source = self.source_code
        assert source is not None
        types = self._instance_types()
        merged: dict[str, Any] = dict(self.hyperparameters or {})
        merged.update(
            adapter.entrypoint_hyperparameters(
                entry_script=str(source.entry_script),
                submit_directory=adapter.CODE_MOUNT,
                distribution=self._trcomp_distribution,
                instance_type=types[0] if types else None,
            )
        )
        if self.compiler_config is not None:
            merged.update(self.compiler_config.to_hyperparameters())
        adapter.encode_like_v3(merged)  # SageMaker's limits, before anything is uploaded
        return merged

    def trcomp_training_request(
        self, input_data_config: list[Any], build: BuildRequest
    ) -> dict[str, Any]:
        """v3's request, built as if the job had no source_code: the image's entrypoint runs.

        ``build`` is v3's own request builder (see :mod:`trcomp.v3._sdk_compat`); v3's
        ``train()`` sends what this returns; it calls this first, so what is refused
        here is refused before anything is uploaded or any container starts: a remote
        job whose hyperparameters or environment carry the caller's AWS credentials,
        and a shared cache the job could not use or must not trust (the checks v2's
        ``fit()`` makes, :func:`trcomp.shared_cache_checks.check_shared_cache`).
        """
        source = self.source_code
        assert source is not None
        channels = list(input_data_config)
        taken = {c.channel_name for c in [*(self.input_data_config or []), *channels]}
        for reserved in (adapter.CODE_CHANNEL, adapter.CACHE_CHANNEL):
            if reserved in taken:
                raise UnsupportedJobError(
                    f"the input channel name {reserved!r} is taken by trcomp.v3.ModelTrainer "
                    "(it carries the code or the local compile cache): rename your channel."
                )
        environment = dict(self.environment or {})
        distributed = self.distributed
        environment.update(
            adapter.launch_environment(getattr(distributed, "process_count_per_node", None))
        )
        hyperparameters = self.trcomp_hyperparameters()
        if self._is_local():
            check_shared_cache(
                self.compiler_config,
                mode="docker",
                environment=self.environment,
                hyperparameters=hyperparameters,
            )
        else:
            # v3 sets sagemaker_session for SageMaker jobs when the trainer is built.
            session = self.sagemaker_session
            check_no_credentials(hyperparameters, environment, credential_values(session))
            check_shared_cache(
                self.compiler_config,
                mode="remote",
                boto_session=session.boto_session,
                environment=self.environment,
                hyperparameters=hyperparameters,
            )
        with _code_channel(source, local=self._is_local()) as code:
            channels.append(code)
            if self._is_local() and self._cache_on():
                cache_dir = Path(self.local_container_root or os.getcwd()) / LOCAL_CACHE_DIR
                cache_dir.mkdir(parents=True, exist_ok=True)
                channels.append(
                    InputData(channel_name=adapter.CACHE_CHANNEL, data_source=str(cache_dir))
                )
                environment.update(adapter.local_cache_environment(cache_dir))
            elif not self._is_local():
                self._remote_checkpoints(environment)
            plain = {
                "hyperparameters": hyperparameters,
                "environment": environment,
                "source_code": None,
                "distributed": None,
            }
            saved = {name: getattr(self, name) for name in plain}
            try:
                self._assign(**plain)
                return build(channels)
            finally:
                self._assign(**saved)

    def _remote_checkpoints(self, environment: dict[str, str]) -> None:
        """Keep the compile cache in the checkpoint location (a default one if none is set)."""
        if self.checkpoint_config is None and self._cache_on():
            session = self.sagemaker_session
            source = self.source_code
            uri = default_checkpoint_location(
                str(session.default_bucket()),
                getattr(session, "default_bucket_prefix", None),
                self.base_job_name,
                _text(source.entry_script) if source else None,
            )
            logger.info("trcomp: compile cache kept at checkpoint_config.s3_uri=%s", uri)
            self._assign(checkpoint_config=CheckpointConfig(s3_uri=uri))
        local_path = getattr(self.checkpoint_config, "local_path", None)
        if isinstance(local_path, str):
            environment.update(checkpoint_environment(local_path))

    def train(
        self,
        input_data_config: list[Any] | None = None,
        wait: bool | None = True,
        logs: bool | None = True,
        dry_run: bool = False,
    ) -> Any:
        """Run the job; in local container mode, with v3's telemetry turned off.

        v3's local container mode leaves the job's compose containers behind (exited,
        or running after Ctrl-C): they are stopped and removed once ``train`` returns.
        """
        if not self._is_local():
            return super().train(input_data_config, wait=wait, logs=logs, dry_run=dry_run)
        root = Path(self.local_container_root or os.getcwd()).resolve()
        try:
            with telemetry_off():
                return super().train(input_data_config, wait=wait, logs=logs, dry_run=dry_run)
        finally:
            if not dry_run:
                remove_compose_containers(root)


def remove_compose_containers(root: Path) -> None:
    """Stop and remove the containers of the compose project v3 wrote into ``root``."""
    label = f"com.docker.compose.project.working_dir={root}"
    docker_cli.remove_labelled(label, outer_grace_s())


@contextlib.contextmanager
def telemetry_off() -> Iterator[Path]:
    """Point ``SAGEMAKER_USER_CONFIG_OVERRIDE`` at a config that opts out of telemetry."""
    previous = os.environ.get(adapter.USER_CONFIG_ENV)
    path = adapter.telemetry_opt_out_file(previous)
    os.environ[adapter.USER_CONFIG_ENV] = str(path)
    try:
        yield path
    finally:
        if previous is None:
            os.environ.pop(adapter.USER_CONFIG_ENV, None)
        else:
            os.environ[adapter.USER_CONFIG_ENV] = previous
        path.unlink(missing_ok=True)


@contextlib.contextmanager
def _code_channel(source: Any, *, local: bool) -> Iterator[InputData]:
    """The ``code`` channel: S3 as is, a local dir mounted (local) or uploaded (remote).

    Remote uploads skip ``SourceCode.ignore_patterns``, as v3's own code channel does.
    """
    source_dir = str(source.source_dir)
    if source_dir.startswith("s3://"):
        yield InputData(channel_name=adapter.CODE_CHANNEL, data_source=source_dir)
        return
    if local:
        resolved = str(Path(source_dir).resolve())
        yield InputData(channel_name=adapter.CODE_CHANNEL, data_source=resolved)
        return
    with tempfile.TemporaryDirectory(prefix="trcomp-code-") as tmp:
        copy = Path(tmp) / "code"
        patterns = list(source.ignore_patterns or [])
        shutil.copytree(source_dir, copy, ignore=shutil.ignore_patterns(*patterns))
        yield InputData(channel_name=adapter.CODE_CHANNEL, data_source=str(copy))


def _text(value: Any) -> str | None:
    return None if value is None else str(value)
