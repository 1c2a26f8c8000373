# condor_lumberjack: everything a fresh machine (Debian, root) needs, from nothing.
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
TESTBED := $(PY) containers/testbed/testbed.py
DOCKER_TIER := $(PY) containers/minicondor/engine.py
# The unit tests' pytest-xdist options: every core by default (the unit tier is bound by
# CPU: 2 workers took it from about 3.7 to 2.8 min on 2 cores); `make test UNIT_PARALLEL=`
# runs them in one process.
UNIT_PARALLEL ?= -n auto --dist worksteal
# Every test's time of the last `make test`, slowest first, one file per tier.
DURATIONS := build/test-durations

.PHONY: install test unit integration docker-test demo testbed-up testbed-down bench lint clean

$(VENV)/.installed: pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet -e '.[test]'
	touch $@

install: $(VENV)/.installed

# Unit tests, then the integration tests on real HTCondor daemons (builds the testbed once),
# then the docker tier where a Docker engine can be started (else pytest says why not).
# Two runs of pytest: the unit tests (in parallel with UNIT_PARALLEL: each test has its
# own temporary directories), then the tiers that share one testbed and its daemons, one
# test at a time. Both always run; make fails when either failed.
test: install
	$(TESTBED) build
	$(DOCKER_TIER) install || echo "docker tier: cannot install a Docker engine here"
	status=0; start=$$(date +%s); \
	LUMBERJACK_DURATIONS=$(DURATIONS)/unit.txt \
		$(PY) -m pytest tests/unit $(UNIT_PARALLEL) -ra --durations=25 || status=1; \
	middle=$$(date +%s); \
	LUMBERJACK_DURATIONS=$(DURATIONS)/testbed.txt \
		$(PY) -m pytest tests --ignore=tests/unit -ra --durations=25 || status=1; \
	end=$$(date +%s); \
	echo "make test: unit tier $$((middle - start)) s, testbed tiers $$((end - middle)) s," \
		"$$((end - start)) s in all; every test's time: $(DURATIONS)/"; \
	exit $$status

unit: install
	$(PY) -m pytest tests/unit $(UNIT_PARALLEL) -q

# One journey against the testbed (built once, started as the tests need it):
# `make integration K=owner_isolation` runs the tests whose names match K.
integration: install
	$(TESTBED) build
	$(PY) -m pytest tests/integration -ra $(if $(K),-k '$(K)')

# The docker tier: the engine and the Compose v2 plugin if missing, an engine started only
# if none runs (and stopped afterwards), the MiniCondor image built once.
docker-test: install
	$(DOCKER_TIER) install
	$(PY) -m pytest tests/docker -ra

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
