"""The trcomp container entrypoint.

The SageMaker training toolkit's ``train`` command imports
``trcomp_container.training:main`` (``SAGEMAKER_TRAINING_MODULE``), which turns
the job's compiler config into environment variables and a launch command,
runs the user's script and reports what the compiler did.
"""

from __future__ import annotations

__all__: list[str] = []
