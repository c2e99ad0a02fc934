# Two entry points for a fresh clone: `make report` (the papermill batch) and `make test`.
# Both build .venv first. TORCH pins the CPU-friendly build; override it on a GPU machine,
# e.g. `make test TORCH=torch` (then the suite runs on the GPU with the interpreter off).
PYTHON ?= python3
VENV ?= .venv
TORCH ?= torch==2.13.0
BIN := $(VENV)/bin
# The stamp names the torch pin: `make test TORCH=...` after a first build reinstalls.
STAMP := $(VENV)/.installed-$(subst /,_,$(subst =,_,$(subst >,_,$(subst <,_,$(TORCH)))))
CONFIG ?=

.PHONY: test test-fast report lint venv clean device-wheels lab ab-tree

$(STAMP): pyproject.toml
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	rm -f $(VENV)/.installed*
	$(BIN)/python -m pip install -q --upgrade "$(TORCH)"
	$(BIN)/python -m pip install -q -e ".[test,notebooks]"
	touch $(STAMP)

venv: $(STAMP)

test: $(STAMP)
	$(BIN)/python -m ruff check mla_kernels tests scripts
	$(BIN)/python -m pytest -q

# The work loop's tier: every test but those marked slow (the papermill batch, compiles in
# child processes, long interpreter runs); a few minutes on two cores. CI runs `make test`.
test-fast: $(STAMP)
	$(BIN)/python -m ruff check mla_kernels tests scripts
	$(BIN)/python -m pytest -q -m "not slow"

report: $(STAMP)
	$(BIN)/python -m mla_kernels.review.report $(if $(CONFIG),--config $(CONFIG))

lint: $(STAMP)
	$(BIN)/python -m ruff check .

# JupyterLab on the same .venv (not one of the two set-up commands: for exploring). No kernel
# is registered: the notebooks name "python3", and a server started from the venv offers the
# venv's own python3 kernel (found in the venv before the user's folder, run with the venv's
# interpreter). As root (a container) JupyterLab needs --allow-root.
LAB_STAMP := $(VENV)/.installed-lab
$(LAB_STAMP): $(STAMP)
	$(BIN)/python -m pip install -q -e ".[lab]"
	touch $(LAB_STAMP)

lab: $(LAB_STAMP)
	$(BIN)/python -m jupyter lab $(if $(filter 0,$(shell id -u)),--allow-root) notebooks/

clean:
	rm -rf $(VENV) reports

# The notebook stack for the offline H200 (CPython 3.12 there), as wheels in .whl/ (git
# ignores it; it is copied to the H200 with the tree). Packages its image already has are left out.
WHEEL_PLATFORMS := $(foreach p,manylinux_2_28_x86_64 manylinux_2_27_x86_64 manylinux_2_17_x86_64 \
	manylinux2014_x86_64 manylinux1_x86_64 any,--platform $(p))
ON_DEVICE := attrs certifi charset_normalizer click idna jinja2 markupsafe packaging psutil \
	pygments python_dateutil pyyaml requests tqdm typing_extensions urllib3 tzdata
# Installed with --no-deps, so what a batch run never imports is left out: the kernel's
# debugger and IPython's completer (10 MB; papermill's kernels start without them).
NOT_RUN := debugpy jedi
device-wheels:
	rm -rf .whl  # a wheel of an older version beside a newer one stops the install
	$(PYTHON) -m pip download -q --only-binary=:all: --python-version 3.12 --implementation cp \
		$(WHEEL_PLATFORMS) -d .whl papermill ipykernel nbconvert nbformat nbclient
	cd .whl && for p in $(ON_DEVICE) $(NOT_RUN); do rm -f $${p}-[0-9]*.whl; done

# The package of another commit beside this tree, for `device_run.sh <commit> ab` with
# AB_OLD=<OLD>=.ab/<OLD> (git ignores .ab/; it travels with the tree like .whl/).
OLD ?=
ab-tree:
	@test -n "$(OLD)" || { echo "OLD: expected a commit, e.g. make ab-tree OLD=a94795a"; exit 2; }
	rm -rf .ab/$(OLD) && mkdir -p .ab/$(OLD)
	git archive "$(OLD)" mla_kernels | tar -x -C .ab/$(OLD)
	$(BIN)/python -c "from pathlib import Path; from mla_kernels.lab.provenance import write_manifest; \
		write_manifest(Path('.ab/$(OLD)/provenance-manifest.json'), commit='$(OLD)', package_only=True)"
