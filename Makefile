# Two commands: `make demo` runs the example gallery, `make test` runs the tests.
# Both create .venv if missing and install what a fresh machine needs. On a machine without
# CUDA, torch comes as the CPU build (pinned, so no CUDA wheels are pulled); on a GPU machine
# a torch already importable by python3 is reused.
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.tessera-installed
PYTEST_ARGS ?= -x -q -n 2

.PHONY: demo test setup docs clean

$(STAMP): pyproject.toml Makefile
	@test -x $(PY) || $(PYTHON) -m venv $(if $(shell $(PYTHON) -c 'import torch' 2>/dev/null && echo yes),--system-site-packages,) $(VENV)
	@$(PY) -c 'import torch, triton' 2>/dev/null || $(PY) -m pip install -q "torch==2.13.0" "triton==3.6.0"
	$(PY) -m pip install -q "numpy<2.4" "sympy>=1.12" "pytest>=7" "pytest-xdist>=3"
	@# torch.testing._internal (imported by Helion's unit tests, benchmarks/helion_tests.py) needs expecttest
	$(PY) -m pip install -q "expecttest"
	@# the Pallas backend (backend="pallas"): JAX on the CPU; 0.10.2 is the last JAX for Python 3.11
	$(PY) -m pip install -q "jax==0.10.2" "jaxlib==0.10.2"
	$(PY) -m pip install -q --no-deps -e .
	@touch $(STAMP)

setup: $(STAMP)

demo: $(STAMP)
	$(PY) -m examples.gallery

test: $(STAMP)
	$(PY) -m pytest $(PYTEST_ARGS)

docs: $(STAMP)  # regenerate docs/language.md from the op table (tests/test_docs.py checks it)
	$(PY) scripts/gen_docs.py

clean:
	rm -rf $(VENV) .pytest_cache
