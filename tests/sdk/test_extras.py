"""The extras that pick the SageMaker SDK: v2 for `make install`, v3 for `make install-v3`."""

from __future__ import annotations

from pathlib import Path

import pytest
import tomllib
from packaging.markers import Marker
from packaging.requirements import Requirement
from packaging.version import InvalidVersion, Version

PYPROJECT = Path(__file__).resolve().parents[2] / "pyproject.toml"
EXTRAS: dict[str, list[str]] = tomllib.loads(PYPROJECT.read_text())["project"][
    "optional-dependencies"
]


def _names(requirements: list[str]) -> set[str]:
    return {r.split("[")[0].split("<")[0].split(">")[0].split("=")[0].strip() for r in requirements}


def test_the_base_install_has_no_sagemaker_sdk() -> None:
    base = tomllib.loads(PYPROJECT.read_text())["project"]["dependencies"]
    assert not {n for n in _names(base) if n.startswith("sagemaker")}


def test_make_install_still_gets_the_v2_sdk_and_make_install_v3_does_not() -> None:
    # make install: .[container,hf,dev]; dev pulls the v2 SDK and the tests in through trcomp[...]
    dev_extras = {
        e for r in map(Requirement, EXTRAS["dev"]) if r.name == "trcomp" for e in r.extras
    }
    assert {"sdk-v2", "test"} <= dev_extras
    assert _names(EXTRAS["sdk-v2"]) == {"sagemaker"}
    assert _names(EXTRAS["sdk-v3"]) == {"sagemaker-train"}
    assert not _names(EXTRAS["test"]) & {"sagemaker", "torch", "torch-xla"}


@pytest.mark.parametrize("extra", sorted(EXTRAS))
def test_extra_names_do_not_parse_as_versions(extra: str) -> None:
    # packaging 22 to 25 compares `extra == "<name>"` as versions when <name> parses as one,
    # and then raises InvalidVersion for every other extra name (it broke `make image`).
    with pytest.raises(InvalidVersion):
        Version(extra)
    assert Marker(f'extra == "{extra}"').evaluate({"extra": "container"}) is (extra == "container")


def test_the_license_is_an_spdx_expression_the_build_backend_reads() -> None:
    # A TOML table (`{ text = ... }`) is deprecated in setuptools (unsupported from
    # 2027-02-18); the SPDX string needs setuptools >= 77.
    pyproject = tomllib.loads(PYPROJECT.read_text())
    assert pyproject["project"]["license"] == "Apache-2.0"
    (setuptools,) = [
        Requirement(r) for r in pyproject["build-system"]["requires"] if r.startswith("setuptools")
    ]
    assert setuptools.specifier.contains("77") and not setuptools.specifier.contains("76.9")
