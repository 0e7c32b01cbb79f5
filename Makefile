# Two commands for a newcomer: `make demo` and `make test`. Both install what they need.
PYTHON ?= python3.11
VENV   := .venv
PY     := $(VENV)/bin/python
STAMP  := $(VENV)/.installed

.PHONY: demo test lint install services browser bench clean

$(PY):
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip

# The constraints file pins torch to the CPU build on disk; GPU machines: see README.
# bubblewrap (a Debian package) builds each runner's box (docs/security.md).
$(STAMP): $(PY) pyproject.toml constraints.txt
	bash scripts/install-debian-packages.sh "workers will refuse repository code" bubblewrap:bwrap
	$(PY) -m pip install --quiet -c constraints.txt -e '.[torch,jax,test]'
	touch $(STAMP)

install: $(STAMP)

# The embedded service: API, dashboard and workers on 127.0.0.1:8000, the built-in suite submitted
# to it as two runs (the neural-network family first); it keeps serving until Ctrl-C. `gradci check`
# is the same engine without the service.
demo: $(STAMP)
	$(VENV)/bin/gradci up --demo

services:
	bash scripts/start-services.sh

# Chromium and chromedriver for the dashboard's browser tests (Debian packages; no browser download).
browser:
	bash scripts/install-debian-packages.sh "the browser tests will be skipped" \
		chromium:/usr/bin/chromium chromium-driver:/usr/bin/chromedriver

# ruff over the whole repository; mypy over the package gradci (through gradci/'s links to its layers);
# basedpyright over the public API and the engine, as users' editors read them; commit subjects of at
# most 72 characters.
lint: $(STAMP)
	$(VENV)/bin/ruff check .
	$(VENV)/bin/mypy
	$(VENV)/bin/basedpyright
	$(PY) scripts/check_commit_subjects.py

# Two pytest processes (pytest-xdist), a test module each at a time so that a module's service starts
# once: most tests wait on spawned services, so two keep both cores of a 2-core machine busy
# (10 min instead of 18 there; bench/RESULTS.md). Each process has its own PostgreSQL database and
# Redis database number (gradci/_testing/databases.py: at most 12 at once). TEST_WORKERS=0: one process.
TEST_WORKERS ?= 2
test: lint services browser
	$(PY) -m pytest -q -p no:cacheprovider --durations=15 -n $(TEST_WORKERS) --dist loadfile

bench: $(STAMP) services
	$(PY) -m bench.engine
	$(PY) -m bench.service
	$(PY) -m bench.load
	$(PY) -m bench.big_run
	$(PY) -m bench.web
	$(PY) -m bench.demo

clean:
	rm -rf $(VENV) .gradci build *.egg-info
