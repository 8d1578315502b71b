"""``trcomp.TrainingCompilerConfig``: the contract's config plus the checks against an estimator.

The fields, validators and hyperparameter codec live in
:mod:`trcomp.contract.config`, which the container uses too; this subclass adds
what only the SDK can do: check a config against the estimator it is given to.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from trcomp.contract import config as contract_config
from trcomp.jobspec import job_spec_of
from trcomp.validation import validate_job

if TYPE_CHECKING:
    from sagemaker.estimator import EstimatorBase

__all__ = ["TrainingCompilerConfig"]


class TrainingCompilerConfig(contract_config.TrainingCompilerConfig):
    """Turn the training compiler on for a SageMaker-style job.

    Pass it as ``compiler_config=`` to :class:`trcomp.PyTorch`,
    :class:`trcomp.HuggingFace` or :class:`trcomp.Estimator`. In the container
    each field becomes environment variables (see docs/environment.md). The
    fields are documented on :class:`trcomp.contract.config.TrainingCompilerConfig`.
    """

    def validate_for(self, estimator: EstimatorBase) -> list[str]:
        """Check this config against an estimator; raise on what cannot work.

        Returns the warnings it issued (also sent through :mod:`warnings`).
        """
        return validate_job(self, job_spec_of(estimator))

    @classmethod
    def validate(cls, estimator: EstimatorBase) -> None:  # type: ignore[override]
        """The AWS SDK's check: raise ``ValueError`` if ``estimator`` cannot run compiled.

        Same call and meaning as ``sagemaker.training_compiler.config.TrainingCompilerConfig
        .validate(estimator)`` (not pydantic's deprecated ``BaseModel.validate``). Checks
        the estimator's own ``compiler_config`` (a default config when it has none) with
        the rules of :meth:`validate_for`; warnings go through :mod:`warnings`.
        """
        config = getattr(estimator, "compiler_config", None)
        if config is None:
            config = cls()
        elif not isinstance(config, contract_config.TrainingCompilerConfig):
            # the AWS class: same two fields
            config = cls(enabled=bool(config.enabled), debug=bool(getattr(config, "debug", False)))
        validate_job(config, job_spec_of(estimator))
