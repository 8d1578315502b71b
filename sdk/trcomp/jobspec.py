"""``JobSpec``: one typed, frozen description of a training job, whichever SDK built it.

trcomp's v2 estimators build one when a job is prepared (``job_spec()``: in the
constructor, for the compiler checks, and at each ``fit()``, for the run mode);
``trcomp.v3.ModelTrainer`` builds one through ``trcomp.v3.adapter``. The compiler
checks (:func:`trcomp.validation.validate_job`) and the three run modes (process,
Docker local mode, SageMaker) read the spec, never an estimator's private
attributes. :meth:`JobSpec.from_estimator` is the one reader of a SageMaker v2
estimator, and it reads only the SDK's public attributes.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from pydantic import BaseModel, ConfigDict, Field

from trcomp.contract.config import TrainingCompilerConfig

if TYPE_CHECKING:
    from sagemaker.estimator import EstimatorBase

__all__ = ["JobSpec", "SdkView", "job_spec_of"]


class JobSpec(BaseModel):
    """A typed, frozen description of a training job: what the checks and run modes read.

    Fields that SageMaker Pipelines may set to a pipeline variable (known only when
    the pipeline runs) are typed ``Any`` and hold a ``str`` otherwise.
    """

    model_config = ConfigDict(frozen=True, extra="forbid")

    compiler_config: TrainingCompilerConfig | None = Field(
        default=None, description="The job's compiler config; None when it has none."
    )
    instance_types: tuple[Any, ...] = Field(
        default=(),
        description="The instance type of every instance group (one entry without groups; "
        "empty when unknown); a str, or a pipeline variable.",
    )
    distribution: Mapping[str, Any] = Field(
        default_factory=dict,
        description="The v2 ``distribution=`` dict, e.g. ``{'torch_distributed': "
        "{'enabled': True}}``; v3's Torchrun and MPI are translated into it.",
    )
    instance_count: int = Field(
        default=1, description="How many instances (hosts) the job runs on, all groups together."
    )
    framework_version: Any = Field(
        default=None,
        description="The torch version the job asks for, as given (``framework_version=``; "
        "``pytorch_version=`` for HuggingFace); None: trcomp's default (2.9.0).",
    )
    hf_trainer: bool = Field(
        default=False,
        description="The job is a ``trcomp.HuggingFace`` one: an unmodified HF Trainer script.",
    )
    image_uri: Any = Field(
        default=None,
        description="The job's image when known without a network call (a user's image, "
        "trcomp's local one); None for trcomp's default SageMaker image before it is resolved.",
    )
    image_is_default: bool = Field(
        default=True, description="True when the image is trcomp's default, not the user's."
    )
    debugger_on: bool = Field(default=False, description="SageMaker Debugger hooks are on.")
    profiler_on: bool = Field(
        default=False, description="SageMaker framework profiling is on (not disabled)."
    )
    entry_point: Any = Field(default=None, description="The training script (``entry_point=``).")
    source_dir: Any = Field(
        default=None, description="The directory the script and its files travel from."
    )
    base_job_name: Any = Field(default=None, description="``base_job_name=``, if set.")
    output_path: Any = Field(
        default=None, description="Where the model and output go: ``s3://``, ``file://`` or None."
    )
    checkpoint_s3_uri: Any = Field(
        default=None,
        description="Where checkpoints and compile caches are kept: the user's ``s3://`` or "
        "``file://`` location; on SageMaker, trcomp's default once the job is submitted.",
    )
    checkpoint_local_path: Any = Field(
        default=None,
        description="The checkpoint directory inside the container (None: /opt/ml/checkpoints).",
    )
    environment: Mapping[str, Any] = Field(
        default_factory=dict, description="The job's environment as the user gave it."
    )

    @property
    def instance_type(self) -> Any:
        """The job's (first) instance type; None when unknown."""
        return self.instance_types[0] if self.instance_types else None

    @classmethod
    def from_estimator(cls, estimator: EstimatorBase, **known: Any) -> JobSpec:
        """Read a SageMaker v2 estimator's public attributes (no network, no AWS calls).

        ``known`` sets what the estimator knows beyond the SDK's attributes (trcomp's
        estimators pass their compiler config and whether the image is the default).
        """
        groups = getattr(estimator, "instance_groups", None) or []
        if groups:
            types = tuple(group.instance_type for group in groups)
            count = sum(int(getattr(group, "instance_count", 1) or 1) for group in groups)
        else:
            instance_type = getattr(estimator, "instance_type", None)
            types = (instance_type,) if instance_type else ()
            raw_count = getattr(estimator, "instance_count", None)
            count = raw_count if isinstance(raw_count, int) else 1
        hf_trainer = any(
            klass.__name__ == "HuggingFace" and klass.__module__.startswith("sagemaker.huggingface")
            for klass in type(estimator).__mro__
        )
        profiler = getattr(estimator, "profiler_config", None)
        # HuggingFace's framework_version is the transformers version.
        torch_attribute = "pytorch_version" if hf_trainer else "framework_version"
        config = getattr(estimator, "compiler_config", None)
        values: dict[str, Any] = {
            "compiler_config": config if isinstance(config, TrainingCompilerConfig) else None,
            "instance_types": types,
            "distribution": dict(getattr(estimator, "distribution", None) or {}),
            "instance_count": count,
            "hf_trainer": hf_trainer,
            "framework_version": getattr(estimator, torch_attribute, None),
            "debugger_on": getattr(estimator, "debugger_hook_config", None) not in (None, False),
            "profiler_on": profiler is not None
            and not getattr(estimator, "disable_profiler", False),
            "entry_point": getattr(estimator, "entry_point", None),
            "source_dir": getattr(estimator, "source_dir", None),
            "base_job_name": getattr(estimator, "base_job_name", None),
            "output_path": getattr(estimator, "output_path", None),
            "checkpoint_s3_uri": getattr(estimator, "checkpoint_s3_uri", None),
            "checkpoint_local_path": getattr(estimator, "checkpoint_local_path", None),
            "environment": dict(getattr(estimator, "environment", None) or {}),
        }
        values.update(known)
        return cls(**values)


@dataclass(frozen=True)
class SdkView:
    """What the SageMaker SDK's own ``fit()`` must read on the estimator for one job.

    The SDK builds its request (or its local-mode containers) from the estimator's
    attributes, so the Docker and SageMaker run modes hand these values to it for
    the duration of one ``fit()`` (:meth:`given_to`), and the user's come back after.
    """

    checkpoint_s3_uri: Any
    checkpoint_local_path: Any
    output_path: Any
    extra_environment: Mapping[str, str] = field(default_factory=dict)

    @contextlib.contextmanager
    def given_to(self, estimator: EstimatorBase) -> Iterator[None]:
        """Set these public SDK attributes for one ``fit()``; put the user's back afterwards.

        Only what this view changes is put back: what the SDK's ``fit()`` fills in
        itself (a default ``output_path``, ``base_job_name``) stays, as without trcomp.
        """
        environment = getattr(estimator, "environment", None)
        wanted: dict[str, Any] = {
            "checkpoint_s3_uri": self.checkpoint_s3_uri,
            "checkpoint_local_path": self.checkpoint_local_path,
            "output_path": self.output_path,
        }
        if self.extra_environment:
            wanted["environment"] = {**(environment or {}), **self.extra_environment}
        saved = {name: getattr(estimator, name, None) for name in wanted}
        changed = [name for name, value in wanted.items() if value is not saved[name]]
        for name in changed:
            setattr(estimator, name, wanted[name])
        try:
            yield
        finally:
            for name in changed:
                setattr(estimator, name, saved[name])


def job_spec_of(estimator: EstimatorBase) -> JobSpec:
    """The spec of any v2 estimator: trcomp's build their own, the SDK's are read."""
    build = getattr(estimator, "job_spec", None)
    return build() if callable(build) else JobSpec.from_estimator(estimator)
