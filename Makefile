# trcomp: every command a developer or CI needs. See README.md.
SHELL := /bin/bash
VENV ?= .venv
PY := $(VENV)/bin/python
PYTHON ?= python3
export SAGEMAKER_SUPPRESS_V2_WARNING := 1

.PHONY: install demo test lint image base-image docker-engine test-container bench docs clean

install: $(VENV)/.installed

$(VENV)/.installed: pyproject.toml
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q -e ".[container,hf,dev]"
	touch $@

demo: install
	$(PY) docs/examples/demo.py

test: install
	$(PY) -m pytest

lint: install
	$(VENV)/bin/ruff check sdk container tests docs
	$(VENV)/bin/mypy

clean:
	rm -rf build dist .pytest_cache .mypy_cache .ruff_cache
