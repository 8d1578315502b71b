"""In the SDK v2 environment, trcomp.v3 says what to install instead of a bare ImportError."""

from __future__ import annotations

import importlib
import sys

import pytest

from trcomp.sdk_check import installed_sdks, wrong_sdk_message


def test_trcomp_v3_in_a_v2_environment_names_the_extra_and_the_make_target() -> None:
    pytest.importorskip("sagemaker.estimator", reason="the SDK v2 is not installed here")
    sys.modules.pop("trcomp.v3", None)
    with pytest.raises(ImportError) as raised:
        importlib.import_module("trcomp.v3")
    message = str(raised.value)
    assert "pip install 'trcomp[sdk-v3]'" in message and "make install-v3" in message
    assert "cannot share one environment" in message
    assert any(sdk.startswith("sagemaker==2.") for sdk in installed_sdks())
    assert "trcomp.v3" not in sys.modules  # a later import tries again


def test_the_message_names_what_is_installed() -> None:
    message = wrong_sdk_message("v2", ModuleNotFoundError("No module named 'sagemaker.estimator'"))
    assert message.startswith("trcomp.PyTorch, trcomp.HuggingFace and trcomp.Estimator need")
    assert "pip install 'trcomp[sdk-v2]' (make install)" in message
    assert "ModuleNotFoundError: No module named 'sagemaker.estimator'" in message
