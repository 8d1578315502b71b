"""What the SDK and the container agree on, and nothing else.

The SDK writes a job's hyperparameters and environment with these modules; the
container (``trcomp_container``) reads them back with the same modules, and
exports the resolved config to the user's process as a
:class:`~trcomp.contract.runtime_config.RuntimeConfig`. The package imports
neither sagemaker nor torch, nor any trcomp module outside it (only
``trcomp._version``), so the container image can use it without the SDK's
dependencies. ``tests/contract/test_boundaries.py`` enforces that.

- :mod:`~trcomp.contract.config`: ``TrainingCompilerConfig`` and its hyperparameter codec.
- :mod:`~trcomp.contract.runtime_config`: the resolved config in ``TRCOMP_CONFIG``.
- :mod:`~trcomp.contract.keys`: hyperparameter and environment variable names.
- :mod:`~trcomp.contract.distribution`: which distributions run, and their hyperparameters.
- :mod:`~trcomp.contract.errors`: the exceptions and warnings.
- :mod:`~trcomp.contract.limits`: SageMaker's hyperparameter limits.
- :mod:`~trcomp.contract.instances`: the instance and GPU catalog.
- :mod:`~trcomp.contract.metrics`: metric names, log lines and their regexes.
- :mod:`~trcomp.contract.shared_cache`: the shared compile cache's location, its environment
  variables, bucket owner check.
- :mod:`~trcomp.contract.shared_trust`: who may write it: private buckets, directories of this user.
- :mod:`~trcomp.contract.proctree`: how a job's process tree is stopped (signals, grace).
"""

from __future__ import annotations

__all__: list[str] = []
