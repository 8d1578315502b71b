"""Every use of the SageMaker SDK v3's private internals, in one module.

The v3 twin of :mod:`trcomp._sdk_compat` (which holds the SDK v2's): no other
module in :mod:`trcomp.v3` names a private v3 attribute, and
tests/v3/test_v3_sdk_compat.py checks each one below against the installed v3
(``make test-v3``), so a v3 release that changes them fails a test instead of a
user's job.

One hook is overridden rather than called, because v3 has no public way to
change the request ``train()`` sends: ``ModelTrainer._create_training_job_args``.
``train()`` calls it once and sends what it returns (CreateTrainingJob, or the
local container's settings). :class:`TrainingRequestHook` overrides it and
hands the work to the public ``trcomp_training_request`` of the class it is
mixed into, with a function that calls v3's own builder.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

__all__ = ["SDK_HOOKS", "BuildRequest", "TrainingRequestHook"]

SDK_HOOKS = ("_create_training_job_args",)
"""Private v3 methods trcomp's ModelTrainer provides because v3's ``train()`` calls them."""

BuildRequest = Callable[[list[Any]], dict[str, Any]]
"""v3's request builder for the trainer as it is now, given the job's channels."""


class TrainingRequestHook:
    """Mixin, before v3's ``ModelTrainer`` in the bases: routes v3's request builder.

    The class it is mixed into defines ``trcomp_training_request(channels, build)``
    and returns the request; ``build(channels)`` is v3's own
    ``_create_training_job_args`` for the trainer's fields at the time of the call.
    """

    def _create_training_job_args(
        self, input_data_config: list[Any] | None = None, boto3: bool = False
    ) -> dict[str, Any]:
        v3_builder = super()._create_training_job_args  # type: ignore[misc]

        def build(channels: list[Any]) -> dict[str, Any]:
            return dict(v3_builder(channels, boto3))

        request: Callable[[list[Any], BuildRequest], dict[str, Any]]
        request = self.trcomp_training_request  # type: ignore[attr-defined]
        return request(list(input_data_config or []), build)
