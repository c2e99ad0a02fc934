# Two entry points for a fresh clone: `make report` (the papermill batch) and `make test`.
# Both build .venv first. TORCH pins the CPU-friendly build; override it on a GPU machine,
# e.g. `make test TORCH=torch` (then the suite runs on the GPU with the interpreter off).
PYTHON ?= python3
VENV ?= .venv
TORCH ?= torch==2.13.0
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed
CONFIG ?=

.PHONY: test report lint venv clean

$(STAMP): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install -q "$(TORCH)"
	$(BIN)/python -m pip install -q -e ".[test,notebooks]"
	touch $(STAMP)

venv: $(STAMP)

test: $(STAMP)
	$(BIN)/python -m ruff check mla_kernels tests
	$(BIN)/python -m pytest -q

report: $(STAMP)
	$(BIN)/python -m mla_kernels.report $(if $(CONFIG),--config $(CONFIG))

lint: $(STAMP)
	$(BIN)/python -m ruff check .

clean:
	rm -rf $(VENV) reports
