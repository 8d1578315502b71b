"""trcomp for the SageMaker SDK v3: ``ModelTrainer`` with ``compiler_config=``.

Needs the SDK v3 (``pip install 'trcomp[sdk-v3]'``, ``make install-v3``) in an
environment without the SDK v2: the two cannot share one. See docs/v3.md.

    from sagemaker.train.configs import Compute, SourceCode
    from trcomp import TrainingCompilerConfig
    from trcomp.v3 import ModelTrainer

    trainer = ModelTrainer(
        source_code=SourceCode(source_dir="src", entry_script="train.py"),
        compute=Compute(instance_type="ml.g5.2xlarge", instance_count=1),
        compiler_config=TrainingCompilerConfig(),
    )
    trainer.train()
"""

from __future__ import annotations

from trcomp.session import quiet_sagemaker

quiet_sagemaker()  # in a v2 environment, no deprecation banner before our error

try:
    import sagemaker.train.model_trainer  # noqa: F401
except ImportError as _missing:  # a v2 environment, or no SDK at all
    from trcomp.sdk_check import wrong_sdk_message

    raise ImportError(wrong_sdk_message("v3", _missing)) from None

from trcomp.config import TrainingCompilerConfig  # noqa: E402
from trcomp.v3.trainer import ModelTrainer  # noqa: E402

__all__ = ["ModelTrainer", "TrainingCompilerConfig"]
