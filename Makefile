# The few commands a newcomer needs. `make demo` and `make test` each work on a fresh clone (and again:
# the demo replaces its own earlier run in runs/quickstart, train.overwrite=true).
PY ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
export HF_HUB_OFFLINE := 1
export HF_DATASETS_OFFLINE := 1
export HF_HUB_DISABLE_TELEMETRY := 1
export TOKENIZERS_PARALLELISM := false

.PHONY: setup references data demo test test-fast coverage lint format bench clients clean

# torch first and pinned: on these machines torch==2.13.0 is a local CPU build, while a bare
# `torch` would pull a multi-GB CUDA build.
$(BIN)/.installed: pyproject.toml
	$(PY) -m venv $(VENV)
	$(BIN)/pip install -q --upgrade pip
	$(BIN)/pip install -q torch==2.13.0
	$(BIN)/pip install -q -e '.[dev]'
	touch $@

setup: $(BIN)/.installed

# The leaderboards' own scoring code, which tests/suites runs on rm's per-example results: RewardBench 0.1.4's
# pure functions (section weights, RewardBench 2's Ties rule), read from its installed files in a venv of its
# own. --no-deps: its pins (transformers 4.51, CUDA-only extras) are not needed for them, only numpy and pandas.
REF_VENV := $(VENV)/ref-rewardbench
$(REF_VENV)/.installed:
	$(PY) -m venv $(REF_VENV)
	$(REF_VENV)/bin/pip install -q --no-deps rewardbench==0.1.4
	$(REF_VENV)/bin/pip install -q numpy pandas
	touch $@

references: $(REF_VENV)/.installed

# The real HH-RLHF harmless-base test file some tests, configs/hh-harmless-tiny.yaml and the benchmarks read,
# fetched from the Hub (the one target that needs the network) into data/hh-rlhf, which git ignores and the tests
# find by themselves; elsewhere: HH_DATA=/some/folder, then export RM_HH_DATA=/some/folder as it prints.
HH_DATA ?= data/hh-rlhf
data: setup
	HF_HUB_OFFLINE=0 HF_DATASETS_OFFLINE=0 $(BIN)/python scripts/get_hh_data.py --out $(HH_DATA)

demo: setup
	$(BIN)/python -m rm train configs/quickstart.yaml train.overwrite=true

# pytest-xdist's workers, each on its own share of the cores (tests/conftest.py), each shared launch run once a
# session by whichever needs it first: 2 for the 2-core machines rm's CI runs on; WORKERS=0 runs one process.
WORKERS ?= 2
XDIST = -n $(WORKERS) --dist loadgroup

test: setup references
	$(BIN)/python -m pytest -q $(XDIST)

# The edit-test loop: the suite without the tests marked slow (launched processes, end-to-end runs, tests of
# about a second or more), under two minutes; `make test` (what CI runs) is the whole suite.
test-fast: setup references
	$(BIN)/python -m pytest -q $(XDIST) -m "not slow"

# Line coverage of rm/ over the whole suite, launched processes included ([tool.coverage.run] in pyproject.toml).
coverage: setup references
	$(BIN)/python -m pytest -q $(XDIST) --cov --cov-report=term:skip-covered

# Throughput against TRL on the real HH file (about 15 minutes; see scripts/bench_train.py).
bench: setup
	$(BIN)/pip install -q -e '.[dev,bench]'
	$(BIN)/python scripts/bench_train.py
	$(BIN)/python scripts/bench_eval.py

# Exports against the tools that consume reward models (transformers 4.x/5.x, TRL, RewardBench, OpenRLHF), and
# the EOS convention (data.eos) through TRL's RewardTrainer and OpenRLHF's local reward model: one venv each under
# CLIENT_VENVS (a folder of your choice; default .venv-clients/ here, which git ignores), each installed from its
# full pin list scripts/clients/locks/NAME.txt (how to refresh one: scripts/check_clients.sh's header). Needs the
# real HH file harmless-base/test.jsonl.gz where the tests find it ($RM_HH_DATA, `make data`, or
# ../shared/data/hh-rlhf; its conversations are what the clients score) and takes about 40 minutes.
CLIENT_VENVS ?= .venv-clients
clients: setup
	@echo "make clients: about 40 minutes; scores the real HH harmless-base test file (RM_HH_DATA, make data, or ../shared)"
	RM_PY=$(abspath $(BIN))/python scripts/check_clients.sh $(abspath $(CLIENT_VENVS))

# ruff, then the import contract: role folders in layers, imports only downwards, no cycles
# (scripts/check_layers.py; tests/meta/test_layers.py shows it failing on a back-import).
lint: setup
	$(BIN)/ruff check rm tests scripts && $(BIN)/ruff format --check rm tests scripts
	$(BIN)/python scripts/check_layers.py

format: setup
	$(BIN)/ruff format rm tests scripts && $(BIN)/ruff check --fix rm tests scripts

clean:
	rm -rf $(VENV) runs .pytest_cache
