"""``JobSpec``: what the compiler checks need to know about a job, whichever SDK built it.

The v2 estimators (:meth:`JobSpec.from_estimator`) and ``trcomp.v3.ModelTrainer``
(``trcomp.v3.adapter``) each build one; :func:`trcomp.validation.validate_job`
reads only this, so both SDKs are checked by the same rules.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

__all__ = ["JobSpec"]


class JobSpec(BaseModel):
    """A typed, frozen description of a training job, read by the compiler checks."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    # Any, not str: an instance type may be a SageMaker Pipelines variable, known at run time.
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
    hf_trainer: bool = Field(
        default=False,
        description="The job is a ``trcomp.HuggingFace`` one: an unmodified HF Trainer script.",
    )
    image_uri: str | None = Field(default=None, description="The job's image, if known.")
    image_is_default: bool = Field(
        default=True, description="True when the image is trcomp's default, not the user's."
    )
    debugger_on: bool = Field(default=False, description="SageMaker Debugger hooks are on.")
    profiler_on: bool = Field(
        default=False, description="SageMaker framework profiling is on (not disabled)."
    )

    @classmethod
    def from_estimator(cls, estimator: Any) -> JobSpec:
        """Read a SageMaker v2 estimator's attributes (no network, no AWS calls)."""
        groups = getattr(estimator, "instance_groups", None) or []
        if groups:
            types = tuple(group.instance_type for group in groups)
        else:
            instance_type = getattr(estimator, "instance_type", None)
            types = (instance_type,) if instance_type else ()
        if groups:
            count = sum(int(getattr(group, "instance_count", 1) or 1) for group in groups)
        else:
            raw_count = getattr(estimator, "instance_count", None)
            count = raw_count if isinstance(raw_count, int) else 1
        hf_trainer = any(
            cls.__name__ == "HuggingFace" and cls.__module__.startswith("sagemaker.huggingface")
            for cls in type(estimator).__mro__
        )
        image_is_default = bool(getattr(estimator, "_trcomp_image_is_default", True))
        profiler = getattr(estimator, "profiler_config", None)
        return cls(
            instance_types=types,
            distribution=dict(getattr(estimator, "distribution", None) or {}),
            instance_count=count,
            hf_trainer=hf_trainer,
            # Read only for a user's image: the default one is resolved with an STS call.
            image_uri=None if image_is_default else getattr(estimator, "image_uri", None),
            image_is_default=image_is_default,
            debugger_on=getattr(estimator, "debugger_hook_config", None) not in (None, False),
            profiler_on=profiler is not None and not getattr(estimator, "disable_profiler", False),
        )
