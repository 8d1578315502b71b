# trcomp: every command a developer or CI needs. See README.md.
SHELL := /bin/bash
VENV ?= .venv
PY := $(VENV)/bin/python
PYTHON ?= python3
export SAGEMAKER_SUPPRESS_V2_WARNING := 1

.PHONY: install install-214 install-v3 test-v3 test-214 demo test timings timings-save corpus-off test-fast test-upstream test-sdk-lowest lint image base-image docker-engine test-container bench bench-warmstart bench-distributed gpu-check docs clean

install: $(VENV)/.installed

# Each environment a clone builds from nothing is kept per machine (~/.cache/trcomp-tests/
# venvs) and hard-linked into the next clean clone when nothing its install reads has
# changed: the files named after `restore`, pip's configuration, the Python
# (tests/helpers/venv_cache.py; TRCOMP_VENV_CACHE=off: always pip). `restore` exits 1
# and leaves the environment to pip when it restored none.
VENV_CACHE = $(PYTHON) tests/helpers/venv_cache.py
$(VENV)/.installed: pyproject.toml
	$(VENV_CACHE) restore install $(VENV) pyproject.toml Makefile || ( set -e; \
	test -x $(PY) || $(PYTHON) -m venv $(VENV); \
	$(PY) -m pip install -q --upgrade pip; \
	$(PY) -m pip install -q -e ".[container,hf,dev]"; \
	: "torch-xla 2.9.0 ships an older copy of torchax: the pinned torchax must win."; \
	$(PY) -m pip install -q --no-deps --force-reinstall "$$($(PY) -c \
		'import importlib.metadata as m; print(next(r.split(";")[0] for r in m.requires("trcomp") if r.startswith("torchax")))')"; \
	$(VENV_CACHE) save $(VENV) )
	touch $@

# torch 2.14 (framework_version="2.14") in its own environment: the 2.9 one has
# torch-xla, jax and torchax, which need torch 2.9. Inductor only, as in the 2.14
# image. Process-mode jobs asking for 2.14 run in it through
# TRCOMP_PROCESS_PYTHON_2_14=$(VENV_214)/bin/python (docs/process-mode.md). The torch
# version is read from the table of images, trcomp.image.uris.IMAGES.
VENV_214 ?= .venv-214
PY_214 := $(VENV_214)/bin/python
TORCH_214 := $(shell grep -o '"2\.14\.[0-9]*"' sdk/trcomp/image/uris.py | head -n 1 | tr -d '"')
install-214: $(VENV_214)/.installed

$(VENV_214)/.installed: pyproject.toml sdk/trcomp/image/uris.py
	test -n "$(TORCH_214)"
	$(VENV_CACHE) restore install-214 $(VENV_214) pyproject.toml Makefile sdk/trcomp/image/uris.py \
	|| ( set -e; \
	test -x $(PY_214) || $(PYTHON) -m venv $(VENV_214); \
	$(PY_214) -m pip install -q --upgrade pip; \
	$(PY_214) -m pip install -q "torch==$(TORCH_214)" -e ".[sdk-v2,test,hf]" \
		"$$(sed -n 's/^ *"\(sagemaker-training[^"]*\)",$$/\1/p' pyproject.toml)" \
		"$$(sed -n 's/^ *"\(redis[^"]*\)",$$/\1/p' pyproject.toml)"; \
	$(PY_214) -c "import torch; assert torch.__version__.split('+')[0] == '$(TORCH_214)', torch.__version__"; \
	$(VENV_CACHE) save $(VENV_214) )
	touch $@

# SageMaker SDK v3 (trcomp.v3.ModelTrainer) in its own environment: v2 and v3
# cannot share one. No torch: jobs run in the image. See docs/v3.md.
VENV_V3 ?= .venv-v3
PY_V3 := $(VENV_V3)/bin/python
install-v3: $(VENV_V3)/.installed

$(VENV_V3)/.installed: pyproject.toml
	$(VENV_CACHE) restore install-v3 $(VENV_V3) pyproject.toml Makefile || ( set -e; \
	test -x $(PY_V3) || $(PYTHON) -m venv $(VENV_V3); \
	$(PY_V3) -m pip install -q --upgrade pip; \
	$(PY_V3) -m pip install -q -e ".[sdk-v3,test]"; \
	$(VENV_CACHE) save $(VENV_V3) )
	touch $@

# The v3 tests; V3_MARKS="container or not container" adds the Docker jobs.
V3_MARKS ?= not container
test-v3: install-v3
	$(PY_V3) -m pytest tests/v3 -m "$(V3_MARKS)"

DEMO_ARGS ?=
demo: install
	$(PY) docs/examples/demo.py $(DEMO_ARGS)

# Three pytest workers (pytest-xdist) on two cores: a test waits on its child processes
# (their start, servers, sleeps) part of the time, so a third keeps the cores busier
# (2,493 test-seconds in 858 s of wall time on three at db80ea5). TEST_WORKERS=0: one
# process. make test-214, which runs beside the Docker tests in .ci/run, keeps two.
TEST_WORKERS ?= 3
TEST_WORKERS_214 ?= 2
# Every run writes its per-test durations to build/test-durations.json (and a whole
# `make test` also to build/test-durations-full.json): tests/helpers/durations.py.
test: install
	$(PY) -m pytest -n $(TEST_WORKERS) --dist worksteal

# The slowest tests, files and directories of the last run (DURATIONS=<file> another;
# DURATIONS_ARGS="--compare <file>" the per-file change between two runs).
DURATIONS ?= build/test-durations.json
DURATIONS_ARGS ?=
timings:
	$(PY) -m tests.helpers.durations $(DURATIONS) $(DURATIONS_ARGS)

# Keep the last whole `make test`'s durations (with its commit) in docs/timings/ and
# regenerate docs/timings.md's table of them; commit both.
timings-save:
	test -f build/test-durations-full.json || { echo "no whole make test run yet"; exit 1; }
	cp build/test-durations-full.json docs/timings/make-test-durations.json
	$(PY) -m trcomp_bench.doctables
	$(PY) -m tests.helpers.durations docs/timings/make-test-durations.json -n 15

# The corpus's stored compiler-off results (tests/container/corpus_off/, per torch
# version): every script, or CORPUS_OFF="a.py b.py" only those. Run after adding or
# editing a corpus script and commit the file (tests/helpers/corpus_off.py).
CORPUS_OFF ?=
corpus-off: install
	$(PY) -m tests.helpers.corpus_off $(CORPUS_OFF)

# The tests that pin torch's behaviour, on the second torch (2.14, $(VENV_214), made by
# `make install-214`; `make test` runs them all on 2.9). Two parts:
# - TESTS_214_PINS, the tests not marked slow: every torch private name (the in-process
#   package's in tests/container/inprocess/test_torch_compat.py) and
#   version-dependent behaviour the container relies on (the start-up hook, the runtime,
#   regional compilation, inductor's options and remote-cache variables);
# - TESTS_214_JOBS, whole: the no-harm tests, the ledger (nothing left changed after the
#   hook's close), ahead-of-time artifacts, and the zero-code
#   corpus (tests/container/corpus/, each script eager against the default switch) on
#   CORPUS_214's scripts: frozen adapters, activation checkpointing and the real
#   process-mode jobs. Cold 2.14 compiles on a 2-core machine put the whole corpus at
#   40 to 50 minutes, past CI's budget: `make test-214 CORPUS_214=all PINS_214_MARKS=`
#   runs everything (the pins' slow tests too).
# The SDK, the Docker and the XLA-engine tests do not depend on the user's torch, or
# need torch-xla/torchax, which stop at 2.9: `make test` runs them.
TESTS_214_PINS := tests/container/test_autocompile.py tests/container/test_autocompile_policy.py \
	tests/container/test_aot_guards.py \
	tests/container/test_hook.py tests/container/test_speedup.py \
	tests/container/test_stepclock.py tests/container/test_runtime.py \
	tests/container/test_compile_kwargs.py tests/container/test_probe.py \
	tests/container/test_shared_cache_stalls.py tests/sdk/runtime/test_regions.py \
	tests/container/inprocess/test_torch_compat.py
TESTS_214_JOBS := tests/container/test_no_harm.py tests/container/test_aot.py \
	tests/container/test_corpus.py tests/container/inprocess/test_ledger.py
PINS_214_MARKS ?= not slow
CORPUS_214 ?= mlp_loop.py,lora_adapters.py,checkpoint_blocks.py
# Both parts run even when the first fails (the target fails if either did).
test-214: $(VENV_214)/.installed
	status=0; \
	$(PY_214) -m pytest -n $(TEST_WORKERS_214) --dist worksteal $(TESTS_214_PINS) \
		$(if $(PINS_214_MARKS),-m "$(PINS_214_MARKS)") || status=$$?; \
	TRCOMP_CORPUS_SCRIPTS=$(CORPUS_214) $(PY_214) -m pytest -n $(TEST_WORKERS_214) \
		--dist worksteal $(TESTS_214_JOBS) || status=$$?; \
	exit $$status

# What the pinned torchax (and its jax) do without each of trcomp's jax-engine
# workarounds: wrong gradients, failed steps. They change only when those pins do
# (tests/sdk/runtime/test_jax_engine.py checks the pins), so `make test` leaves
# them out; run this after changing a pin, and drop a workaround whose test fails.
test-upstream: install
	$(PY) -m pytest -n $(TEST_WORKERS) -m upstream tests/sdk/runtime

# The quick loop while editing: `make test` without the tests marked slow (real
# training subprocesses, real compiles, a moto server each) and without Docker.
test-fast: install
	$(PY) -m pytest -m "not slow and not container"

# The SDK tests on the lowest SageMaker SDK v2 that pyproject allows; `make test`
# runs them on the newest (what `make install` resolves). Only the sagemaker wheel
# is swapped: it goes first on PYTHONPATH, its dependencies stay the venv's.
# tests/sdk/runtime is left out: it tests the in-job torch runtime, which never
# imports sagemaker (`make test` runs it).
SAGEMAKER_LOWEST := $(shell sed -n 's/.*"sagemaker>=\([0-9.]*\),<3".*/\1/p' pyproject.toml)
SDK_LOWEST_DIR := build/sagemaker-$(SAGEMAKER_LOWEST)
test-sdk-lowest: install
	test -d $(SDK_LOWEST_DIR)/sagemaker || $(PY) -m pip install -q --no-deps \
		--target $(SDK_LOWEST_DIR) "sagemaker==$(SAGEMAKER_LOWEST)"
	PYTHONPATH=$(SDK_LOWEST_DIR) $(PY) -c \
		"import sagemaker; from packaging.version import Version as V; \
		assert V(sagemaker.__version__) == V('$(SAGEMAKER_LOWEST)'), sagemaker.__file__"
	PYTHONPATH=$(SDK_LOWEST_DIR) $(PY) -m pytest tests/sdk --ignore=tests/sdk/runtime \
		-m "not container and not slow"

lint: install
	$(VENV)/bin/ruff check sdk container tests docs
	$(VENV)/bin/ruff format --check sdk container tests docs
	$(VENV)/bin/mypy

clean:
	rm -rf build dist .pytest_cache .mypy_cache .ruff_cache

# ---- Docker: engine, offline base image, training image, container tests ----
# make image                      builds on the public CUDA PyTorch image (needs a registry)
# make image OFFLINE=1            builds on trcomp-base:bookworm, made here with debootstrap
# make image BASE_IMAGE=...       builds on any image with python3 (Debian/Ubuntu based)
# make image EXTRA_CA_BUNDLE=f    trusts an extra CA bundle (TLS-inspecting proxies)
# make image TORCH_VERSION=2.14   the image of another torch version (trcomp.image.uris.IMAGES;
#                                 default: the default version), tagged as local mode runs it
BASE_TAG ?= trcomp-base:bookworm
TORCH_VERSION ?=
# Empty: the tag local mode runs for TORCH_VERSION (trcomp-training:latest for the default).
IMAGE_TAG ?=
ifeq ($(OFFLINE),1)
BASE_IMAGE ?= $(BASE_TAG)
endif
BASE_IMAGE ?=
EXTRA_CA_BUNDLE ?=

docker-engine:
	container/docker_engine.sh

base-image: docker-engine
	container/build_base.sh $(BASE_TAG)

# One build path: `make image` runs `trcomp image build` (trcomp.image.build.run_build);
# building on $(BASE_TAG) makes it first with container/build_base.sh (--offline).
IMAGE_BUILD_ARGS = $(if $(IMAGE_TAG),--tag "$(IMAGE_TAG)")
IMAGE_BUILD_ARGS += $(if $(TORCH_VERSION),--framework-version "$(TORCH_VERSION)")
IMAGE_BUILD_ARGS += $(if $(filter $(BASE_TAG),$(BASE_IMAGE)),--offline)
IMAGE_BUILD_ARGS += $(if $(BASE_IMAGE),--base-image "$(BASE_IMAGE)")
IMAGE_BUILD_ARGS += $(if $(EXTRA_CA_BUNDLE),--extra-ca-bundle "$(EXTRA_CA_BUNDLE)")
image: install docker-engine
	$(PY) -m trcomp.cli image build $(strip $(IMAGE_BUILD_ARGS))

test-container: install docker-engine
	$(MAKE) image OFFLINE=1
	$(PY) -m pytest -m container tests/docker

# Full CPU benchmark: every reference workload, eager against each compiler in
# rounds (the cold one, then warm ones; 3 by default), with each row's spread and
# a flag when the load changed. Two rounds took 8.7 min on a quiet 2-core machine,
# 20 min on a busy one; three take about half as long again.
# Writes the JSON behind docs/benchmarks.md's CPU table, then regenerates the docs'
# tables (make docs). BENCH_ARGS adds options, e.g. BENCH_ARGS="--rounds 5";
# BENCH_OUT=DIR writes elsewhere.
BENCH_OUT ?= docs/benchmarks
bench: install
	$(PY) -m trcomp_bench --json $(BENCH_OUT)/cpu.json --markdown $(BENCH_OUT)/cpu.md \
		--png $(BENCH_OUT)/cpu.png $(BENCH_ARGS)
	$(PY) -m trcomp_bench.doctables

# Warm starts per torch version, side by side in one run of interleaved rounds: first
# step cold, warm from the FX-graph cache, warm from the AOT artifact (2.14), steady
# step against eager, for the demo model and two reference workloads, through the
# zero-code hook (docs/benchmarks.md). 2.14 runs on TRCOMP_PROCESS_PYTHON_2_14, else
# on $(VENV_214) (make install-214). Two rounds took about 25 min on a busy 2-core
# machine. WARMSTART_ARGS adds options, e.g. WARMSTART_ARGS="--rounds 3".
bench-warmstart: install install-214
	TRCOMP_PROCESS_PYTHON_2_14=$${TRCOMP_PROCESS_PYTHON_2_14:-$(abspath $(PY_214))} \
		$(PY) -m trcomp_bench.warmstart --json $(BENCH_OUT)/warmstart.json $(WARMSTART_ARGS)
	$(PY) -m trcomp_bench.doctables

# Distributed rows: DDP and FSDP2 of gpt2 on 2 gloo ranks as process-mode jobs, per
# round the compiler off, the default config cold with the ranks compiling at once and
# with compile turns, and warm (docs/benchmarks.md). Two rounds of both wraps are 16
# jobs. DISTRIBUTED_ARGS adds options, e.g. DISTRIBUTED_ARGS="--rounds 3".
bench-distributed: install
	$(PY) -m trcomp_bench.distributed --json $(BENCH_OUT)/cpu-distributed.json \
		$(DISTRIBUTED_ARGS)

# Rewrites every table of measured numbers in docs/ from the JSON behind it
# (tests/docs/test_doc_tables.py fails while one is stale).
docs: install
	$(PY) -m trcomp_bench.doctables

# GPU check (needs an NVIDIA GPU; 2 for the DDP part): probe, engines, step metric,
# CUDA_VISIBLE_DEVICES, NCCL/DDP, in under 10 minutes. Results are written as they
# come to $(GPU_CHECK_OUT)/gpu-check.{json,md}. Any python with torch and pydantic
# works from this checkout: make gpu-check GPU_PY=python3. GPU_CHECK_ARGS=--dry-run
# runs the same code on CPU. TORCH_VERSION=2.14 runs it on that torch: GPU_PY when
# its torch is 2.14, else the Python TRCOMP_PROCESS_PYTHON_2_14 names (as process
# mode picks it; make install-214 makes one); the report records the torch that ran.
GPU_PY ?= $(PY)
GPU_CHECK_OUT ?= gpu-check
GPU_CHECK_ARGS ?=
TORCH_VERSION ?=
gpu-check:
	PYTHONPATH=sdk:container$${PYTHONPATH:+:$$PYTHONPATH} \
		$(GPU_PY) -m trcomp_bench.gpu_check --out $(GPU_CHECK_OUT) \
		$(if $(TORCH_VERSION),--torch-version $(TORCH_VERSION)) $(GPU_CHECK_ARGS)
