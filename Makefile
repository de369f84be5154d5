# Set-up and main jobs. `make demo` and `make test` create the virtual environment on first use:
# `make demo` installs the core with the extra of the engine it runs (simbackend[mujoco] by default),
# `make test` every extra, the test tools and the Motrix plugin.
#
# TORCH_SPEC pins PyTorch to the CPU build. On a machine with a GPU, override it:
#   make test TORCH_SPEC=torch            (or e.g. TORCH_SPEC='torch==2.13.0+cu128')
PYTHON     ?= python3
VENV       ?= .venv
TORCH_SPEC ?= torch==2.13.0
SIM        ?= mujoco
# the backends `make test` runs the conformance suite against (mjwarp: on warp's CPU device; motrix: the
# plugin in plugins/motrix,
# installed as a third party would install it)
SIMS       ?= mujoco sapien mjwarp motrix
# the backends the suite also runs against sharded: two Ray actors each (simbackend.sharding), every clause
# but those of the engine's own physics (physics, determinism, tasks), which tests/test_sharding.py covers
# by checking every sharded env bit-identical to the unsharded one
SHARDED    ?= mujoco sapien
SHARDED_SKIP := $(foreach f,physics determinism tasks,--ignore=src/simbackend/contract_tests/test_$(f).py)
# the mixed backends the suite also runs against (simbackend.mixing: each engine's block of envs behind one
# backend), every clause but those of the engines' own physics, as sharded (tests/test_mixed_backend.py checks
# every env bit-identical to its engine's plain backend; docs/mixed.md says the whole suite passes)
MIXED      ?= mujoco,motrix
# CPU PhysX holds one scene per env (at most 1000 per process): a smaller demo batch there
DEMO_ENVS  ?= $(if $(filter sapien,$(SIM)),256,1024)
# the extra `make demo` installs: the engine's own (motrix is a plugin: the full set-up)
DEMO_EXTRA ?= $(if $(filter sapien,$(SIM)),sapien,mujoco)
# `make test` runs lint, tests/ (in groups of files) and the suite runs in one pool, SUITE_JOBS at a time
# (every core), the longest first, each in one pytest process (xdist's workers would each import torch and
# the engine again): no core waits for a phase to end; each run's output is printed whole when it ends
# (make --output-sync)
SUITE_JOBS ?= $(shell nproc 2>/dev/null || echo 2)
SUITE      := MUJOCO_GL=egl $(VENV)/bin/python -m pytest -p no:xdist
PYTEST     := $(SUITE)
# tests/ and plugins/motrix/tests: the heaviest files in groups of about equal time (tests-1 ... tests-5),
# every other file in tests-rest, so that a new test file runs without being listed
TESTS_1    := tests/test_benchmark_smoke.py
TESTS_2    := tests/test_suite_catches_broken.py tests/parity
TESTS_3    := tests/test_sharding.py tests/test_cli_train.py tests/test_robots.py
TESTS_4    := tests/test_docs.py tests/test_deferred_loop.py tests/test_sweeps.py tests/test_training.py
TESTS_5    := tests/test_cli.py tests/test_extras.py tests/test_calibration.py tests/test_registry.py \
	tests/test_torch_engine.py
TEST_GROUPS := 1 2 3 4 5
TESTS_REST := $(foreach g,$(TEST_GROUPS),$(addprefix --ignore=,$(TESTS_$(g))))
BIN        := $(VENV)/bin
STAMP      := $(VENV)/.simbackend-installed
DEMO_STAMP := $(VENV)/.simbackend-$(DEMO_EXTRA)

# the suite runs, the longest first (so that the last to start are short)
SUITE_RUNS := $(addprefix suite-,$(filter mjwarp,$(SIMS))) suite-torch $(addprefix sharded-,$(SHARDED)) \
	$(addprefix mixed-,$(MIXED)) $(addprefix suite-,$(filter-out mjwarp,$(SIMS)))
TEST_RUNS  := $(addprefix tests-,$(TEST_GROUPS)) tests-rest
# everything `make test` runs, the longest first (measured times: docs/testing.md), but lint second (a minute,
# so that a lint error stops the pool early)
TEST_POOL  := $(addprefix suite-,$(filter mjwarp,$(SIMS))) lint suite-torch tests-3 sharded-sapien tests-2 \
	tests-rest tests-5 tests-1 tests-4 $(filter-out sharded-sapien,$(addprefix sharded-,$(SHARDED))) \
	$(addprefix mixed-,$(MIXED)) $(addprefix suite-,$(filter-out mjwarp,$(SIMS)))

.PHONY: setup demo test lint contract bench pictures clean suites tests pool $(SUITE_RUNS) $(TEST_RUNS)

$(VENV)/bin/python:
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet "$(TORCH_SPEC)"

$(DEMO_STAMP): pyproject.toml Makefile | $(VENV)/bin/python
	$(BIN)/python -m pip install --quiet -e ".[$(DEMO_EXTRA)]"
	touch $(DEMO_STAMP)

$(STAMP): pyproject.toml plugins/motrix/pyproject.toml Makefile | $(VENV)/bin/python
	$(BIN)/python -m pip install --quiet -e ".[test]"
# the MotrixSim backend is a separate distribution (a plugin): installed after the package it plugs into
	$(BIN)/python -m pip install --quiet -e plugins/motrix
	touch $(STAMP)

setup: $(STAMP)

demo: $(if $(filter motrix,$(SIM)),$(STAMP),$(DEMO_STAMP))
	MUJOCO_GL=egl $(BIN)/simbackend run --sim $(SIM) --model arm7 --num-envs $(DEMO_ENVS) --steps 500 --nsteps 4
	@echo
	@echo "Next, try (source $(VENV)/bin/activate first):"
	@echo "  pip install -e '.[playback,train]'                   # videos and training (the demo installed the engine)"
	@echo "  simbackend info                                      # backends, devices, capabilities"
	@echo "  simbackend run --sim $(SIM) --model quadruped --num-envs 16 --steps 200 --video quadruped.mp4"
	@echo "  simbackend train --task cartpole --sim $(SIM) --out runs/cartpole   # PPO, about 5 s: stops at 100 % success"
	@echo "  simbackend eval --checkpoint runs/cartpole/checkpoint_final.pt --sim mujoco"
	@echo "  simbackend parity --sim $(SIM) --model arm7          # how far from MuJoCo, tier by tier"
	@echo "  make test                                            # every engine and extra, the suites"
	@echo "The tour: README.md; every command: docs/cli.md."

# ruff (lint + format) and mypy (its files are listed in pyproject.toml), then the tests and the suite
lint: $(STAMP)
	$(BIN)/ruff check src tests benchmarks plugins examples
	$(BIN)/ruff format --check src tests benchmarks plugins examples
	$(BIN)/mypy

test: $(STAMP)
	@$(MAKE) --no-print-directory -j$(SUITE_JOBS) --output-sync=target pool

pool: $(TEST_POOL)

# tests/ and plugins/motrix/tests alone (`make tests -j2`: the groups side by side)
tests: $(TEST_RUNS)

$(addprefix tests-,$(TEST_GROUPS)): tests-%: $(STAMP)
	$(PYTEST) $(TESTS_$*)

tests-rest: $(STAMP)
	$(PYTEST) tests plugins/motrix/tests $(TESTS_REST)

# the conformance suite on every engine of SIMS, sharded on those of SHARDED, and on the pure-torch engine
suites: $(SUITE_RUNS)

$(addprefix suite-,$(SIMS)): suite-%: $(STAMP)
	$(SUITE) src/simbackend/contract_tests --sim $*

$(addprefix sharded-,$(SHARDED)): sharded-%: $(STAMP)
	$(SUITE) src/simbackend/contract_tests $(SHARDED_SKIP) --sim $* --sim-option shards=2 --sim-option sharding.pool=true

$(addprefix mixed-,$(MIXED)): mixed-%: $(STAMP)
	$(SUITE) src/simbackend/contract_tests $(SHARDED_SKIP) --sim $*

# a minimal pure-torch engine written from docs/writing-a-backend.md passes the same suite
suite-torch: $(STAMP)
	PYTHONPATH=tests $(SUITE) src/simbackend/contract_tests -p torch_engine --sim torch

contract: $(STAMP)
	$(BIN)/simbackend contract --sim $(SIM)

bench: $(STAMP)
	$(BIN)/python benchmarks/bench_mujoco.py
	$(BIN)/python benchmarks/bench_sapien.py
	$(BIN)/python benchmarks/bench_mjwarp.py
	$(BIN)/python benchmarks/bench_sharded.py
	MUJOCO_GL=egl $(BIN)/python benchmarks/bench_motrix.py
	MUJOCO_GL=egl $(BIN)/python benchmarks/bench_playback.py
	MUJOCO_GL=egl $(BIN)/python benchmarks/bench_tasks.py
	$(BIN)/python benchmarks/bench_overhead.py
	$(BIN)/python benchmarks/report.py

# the pictures in README.md and docs/playback.md, made with the CLI as a user would (recorded on PhysX, drawn by MuJoCo)
PICTURES := $(VENV)/pictures
pictures: $(STAMP)
	mkdir -p $(PICTURES)
	MUJOCO_GL=egl $(BIN)/simbackend record --sim sapien --model quadruped --keyframe stand --steps 3 --num-envs 1 \
		--seed 1 --out $(PICTURES)/quadruped.h5 --overwrite
	MUJOCO_GL=egl $(BIN)/simbackend play $(PICTURES)/quadruped.h5 --sim mujoco --size 480x320 \
		--png docs/images/quadruped_played.png --overwrite
	MUJOCO_GL=egl $(BIN)/simbackend record --sim sapien --model cartpole --steps 150 --nsteps 10 --num-envs 1 \
		--seed 2 --out $(PICTURES)/cartpole.h5 --overwrite
	MUJOCO_GL=egl $(BIN)/simbackend play $(PICTURES)/cartpole.h5 --sim mujoco --size 480x320 \
		--png docs/images/cartpole_played.png --overwrite
	MUJOCO_GL=egl $(BIN)/simbackend record --sim sapien --model arm7 --keyframe home --steps 120 --num-envs 4 \
		--nsteps 4 --out $(PICTURES)/arm7.h5 --overwrite
	MUJOCO_GL=egl $(BIN)/simbackend play $(PICTURES)/arm7.h5 --sim mujoco --size 480x320 \
		--png docs/images/arm7_played.png --overwrite

clean:
	rm -rf $(VENV) build *.egg-info .pytest_cache .hypothesis
