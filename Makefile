# Two commands for a newcomer: `make demo` and `make test`. Both install what they need.
PYTHON ?= python3.11
VENV   := .venv
PY     := $(VENV)/bin/python
STAMP  := $(VENV)/.installed

.PHONY: demo test install services bench clean

$(PY):
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip

# The constraints file pins torch to the CPU build on disk; GPU machines: see README.
$(STAMP): $(PY) pyproject.toml constraints.txt
	$(PY) -m pip install --quiet -c constraints.txt -e '.[torch,jax,test]'
	touch $(STAMP)

install: $(STAMP)

demo: $(STAMP)
	$(VENV)/bin/gradci check

services:
	bash scripts/start-services.sh

test: $(STAMP) services
	$(PY) -m pytest -q -p no:cacheprovider

bench: $(STAMP)
	$(PY) bench/engine.py

clean:
	rm -rf $(VENV) .gradci build *.egg-info
