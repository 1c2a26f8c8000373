# condor_lumberjack: everything a fresh machine (Debian, root) needs, from nothing.
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
TESTBED := $(PY) containers/testbed/testbed.py

.PHONY: install test unit integration demo testbed-up testbed-down bench lint clean

$(VENV)/.installed: pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet -e '.[test]'
	touch $@

install: $(VENV)/.installed

# Unit tests, then the integration tests on real HTCondor daemons (builds the testbed once).
test: install
	$(TESTBED) build
	$(PY) -m pytest tests -ra

unit: install
	$(PY) -m pytest tests/unit -q

integration: install
	$(TESTBED) build
	$(PY) -m pytest tests/integration -ra

# The whole local journey, step by step, on the testbed.
demo: install
	$(TESTBED) build
	$(PY) containers/testbed/demo.py

testbed-up: install
	$(TESTBED) up

testbed-down: install
	$(TESTBED) down

bench: install
	$(TESTBED) build
	$(PY) bench/run.py

lint: install
	$(PY) -m ruff check lumberjack tests containers bench
	$(PY) -m ruff format --check lumberjack tests containers bench
	@# every script the site agent writes, rendered for each batch system and launcher
	@dir=$$(mktemp -d) && $(PY) tests/unit/fixtures/batch/render_scripts.py "$$dir" >/dev/null \
		&& $(VENV)/bin/shellcheck "$$dir"/*.sh; status=$$?; rm -rf "$$dir"; exit $$status

clean:
	rm -rf $(VENV) *.egg-info .pytest_cache .ruff_cache
