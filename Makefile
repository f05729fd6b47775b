# firesafe: `make demo` and `make test` set everything up on a fresh machine.
PY ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed

.PHONY: setup demo test test-fast lint bench bench-peers soak clean browser pgbouncer docs

$(STAMP): pyproject.toml
	$(PY) -m venv $(VENV)
	$(BIN)/pip install -q --upgrade pip
	$(BIN)/pip install -q -e ".[dev]"
	touch $(STAMP)

setup: $(STAMP)

demo: $(STAMP)
	$(BIN)/python -m demo
	@echo
	@echo "== and an agent run whose worker is SIGKILLed mid-run, then resumes from its last completed turn =="
	$(BIN)/python -m examples.agent_run --dir demo-data/agent-run

# ruff, the type checker over firesafe/ (its settings: [tool.mypy] in pyproject.toml), then the
# import layers of docs/architecture.md ([tool.importlinter] in pyproject.toml).
lint: $(STAMP)
	$(BIN)/ruff check .
	$(BIN)/mypy
	$(BIN)/lint-imports

# Debian's headless Chromium for the dashboard's browser tests (Playwright drives it; it never downloads one).
browser:
	@test -x /usr/bin/chromium || { apt-get update -q && DEBIAN_FRONTEND=noninteractive apt-get install -y -q chromium; }

# Debian's PgBouncer for the tests behind a transaction-mode pooler (tests/postgres/pgbouncer.py starts
# its own, on a free port; the package's own service is not used).
pgbouncer:
	@test -x /usr/sbin/pgbouncer || { apt-get update -q && DEBIAN_FRONTEND=noninteractive apt-get install -y -q pgbouncer; }

# The documentation site (mkdocs.yml), built --strict into site/ (ignored): a broken link, anchor or
# API reference fails it. Nothing is fetched at build time.
docs: $(STAMP)
	NO_MKDOCS_2_WARNING=1 $(BIN)/mkdocs build --strict

# Four pytest processes (pytest-xdist) share the tests, on two cores: most of the suite's time is spent
# waiting (on worker processes, leases, rate limits, servers), not computing. Then, one at a time, the
# tests that measure a throughput ratio (marked `alone`: the others' load would move it) and the drill
# that restarts the PostgreSQL server (every other PostgreSQL test would see the restart).
test: $(STAMP) lint browser pgbouncer docs
	$(BIN)/python -m pytest -q -p no:cacheprovider -n 4 --dist worksteal -m "not pg_restart and not alone" --durations=20
	$(BIN)/python -m pytest -q -p no:cacheprovider -m "alone or pg_restart"

test-fast: $(STAMP)
	$(BIN)/python -m pytest -q -x -m "not slow"

bench: $(STAMP)
	$(BIN)/python bench/throughput.py

# firesafe beside huey, rq, celery, dramatiq, procrastinate and pgqueuer (each pip-installed in its own
# venv under bench/peers/.venvs/), on this machine's PostgreSQL and Redis; rewrites the peers table in
# docs/benchmarks.md and appends the run to bench/HISTORY.md.
# Not part of `make test`. ARGS=--quick for a short run.
bench-peers: $(STAMP)
	$(BIN)/python bench/peers/run.py $(ARGS)

soak: $(STAMP)
	FIRESAFE_SOAK=1 $(BIN)/python -m pytest -q -m slow

clean:
	rm -rf $(VENV) .pytest_cache .ruff_cache firesafe.egg-info
