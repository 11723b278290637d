# Two commands on a fresh machine: `make demo` and `make test`. Both are idempotent and
# build their own virtualenv at .venv.
PY ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.hpcmem-installed

.PHONY: setup demo test clean

$(BIN)/python:
	$(PY) -m venv $(VENV)

# The CPU build of torch must be installed before sentence-transformers, or pip pulls a
# multi-GB CUDA build. The stamp makes re-runs cheap; it is rebuilt when pyproject changes.
$(STAMP): pyproject.toml | $(BIN)/python
	$(BIN)/pip install -q --upgrade pip setuptools wheel
	$(BIN)/pip install -q torch==2.13.0
	$(BIN)/pip install -q -e '.[ml,agents,web,test,bench]'
	touch $(STAMP)

# The ONNX export lets queries encode without torch; made once, verified on every run.
setup: $(STAMP)
	$(BIN)/hpcmem model export

# The demo starts from an empty store each time, so every run shows the same thing.
demo: setup
	rm -rf $(CURDIR)/.hpcmem-demo
	HPCMEM_HOME=$(CURDIR)/.hpcmem-demo bash data/samples/demo.sh $(BIN)/hpcmem

test: setup
	$(BIN)/python -m pytest -q

clean:
	rm -rf $(VENV) .hpcmem-demo

# The single-node Slurm lab kept up for a person (as root): docs/slurm-harness.md.
.PHONY: lab-up lab-status lab-down
lab-up:
	$(PY) -m tests.integration.slurm_lab up $(LAB_ARGS)

lab-status:
	$(PY) -m tests.integration.slurm_lab status

lab-down:
	$(PY) -m tests.integration.slurm_lab down
