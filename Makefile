# Benchmarks and the peer venv. See BENCHMARKS.md ("How to reproduce").
#
# Where results go: every run writes into target/bench/ (untracked), unless asked
#   PUBLISH=1   to write the tracked results instead: benches/results/ (and BENCHMARKS.md with
#               benches/plots/ for `make bench`, benches/results/latest-quick.md for `make bench-quick`)
#   OUT=PATH    to write the results file exactly there (its report and pytest-benchmark JSON beside it)
#
#   HERMES_PYTHON  interpreter with hermes installed (default: ./.venv/bin/python, made by scripts/setup)
#   PEERS_DIR      where the peer venv lives (default: benches/.peers; see benches/setup_peers.sh)
#   PEERS_PG_DIR   where the PostgreSQL benchmark's peer venv lives (default: benches/.peers-pg)

VENV_PYTHON := $(CURDIR)/.venv/bin/python
HERMES_PYTHON ?= $(if $(wildcard $(VENV_PYTHON)),$(VENV_PYTHON),)
PEERS_DIR ?= $(CURDIR)/benches/.peers
export PEERS_DIR
PEERS_PYTHON := $(abspath $(PEERS_DIR))/venv/bin/python
PEERS_PG_DIR ?= $(CURDIR)/benches/.peers-pg
PEERS_PG_PYTHON := $(abspath $(PEERS_PG_DIR))/venv/bin/python
WHERE := $(if $(PUBLISH),--publish) $(if $(OUT),--out $(abspath $(OUT)))

.PHONY: peers peers-postgres hermes-python bench bench-quick bench-check bench-report bench-compare bench-scale \
	bench-store bench-gateway bench-cli bench-migrate bench-pg-search bench-postgres bench-rust interop

# The peers' own venv: hermes-agent 0.19.0, openai-agents, langgraph-checkpoint-sqlite,
# matplotlib, pytest-benchmark.
peers:
	bash benches/setup_peers.sh

# The PostgreSQL benchmark's peers, in a venv of their own: openai-agents with SQLAlchemy and
# asyncpg, langgraph-checkpoint-postgres with psycopg.
peers-postgres:
	PEERS_DIR=$(PEERS_PG_DIR) bash benches/setup_peers.sh postgres

hermes-python:
	@test -n "$(HERMES_PYTHON)" || { echo "make: no ./.venv/bin/python: run scripts/setup first (or set HERMES_PYTHON)" >&2; exit 1; }
	@$(HERMES_PYTHON) -c "import hermes._core" 2>/dev/null || { echo "make: $(HERMES_PYTHON) cannot import hermes: run scripts/setup first" >&2; exit 1; }

# Full run (3 rounds, FULL and NORMAL, ~60 min): target/bench/results/, its report and plots.
bench: hermes-python peers
	$(HERMES_PYTHON) benches/run.py --peers-python $(PEERS_PYTHON) $(WHERE)

# Small sizes, 1 round (~2 minutes): target/bench/results/<utc>-<commit>-quick.{json,md}.
bench-quick: hermes-python peers
	$(HERMES_PYTHON) benches/run.py --quick --peers-python $(PEERS_PYTHON) $(WHERE)

# A quick run of the code as it is now, compared figure by figure with BEFORE (default: the
# published quick run) against both runs' noise probes; fails when a figure of ours is worse
# beyond the larger probe spread. AFTER=<results file> compares a stored run instead.
BEFORE ?= benches/results/latest-quick.json
CHECK_OUT := $(CURDIR)/target/bench/check/quick.json
bench-check: hermes-python peers
	@if [ -z "$(AFTER)" ]; then \
		echo "$(HERMES_PYTHON) benches/run.py --quick --peers-python $(PEERS_PYTHON) --out $(CHECK_OUT)"; \
		$(HERMES_PYTHON) benches/run.py --quick --peers-python $(PEERS_PYTHON) --out $(CHECK_OUT) || exit 1; \
	fi
	$(PEERS_PYTHON) benches/compare.py $(BEFORE) $(or $(AFTER),$(CHECK_OUT))

# Re-render the tracked BENCHMARKS.md and benches/plots/ from the published full results file.
bench-report: peers
	$(PEERS_PYTHON) benches/report.py benches/results/latest.json

# Stored runs side by side, operation by operation, with pytest-benchmark's own compare
# (every run also writes pytest-benchmark/<run>.json beside its results file).
# Choose with RUNS (paths or globs from the repository root), e.g.
# RUNS="benches/results/pytest-benchmark/*0fc1d5a-quick.json target/bench/results/pytest-benchmark/*-quick.json".
# (Run from /tmp: pytest-benchmark would otherwise load this project's pytest setup.)
RUNS ?= benches/results/pytest-benchmark/*.json
bench-compare: peers
	@test -n "$(wildcard $(RUNS))" || { echo "make: no file matches RUNS=$(RUNS)" >&2; exit 1; }
	cd /tmp && $(PEERS_PYTHON) -m pytest_benchmark compare \
		--group-by=group --sort=name --columns=median,iqr,min,max,rounds $(abspath $(wildcard $(RUNS)))

# Search over 1M messages and a db growing to 100k sessions, ours vs hermes-agent
# (~10 min): target/bench/results/scale.json. BENCHMARKS.md shows the published one
# (PUBLISH=1) after the next `make bench PUBLISH=1` or `make bench-report`.
bench-scale: hermes-python peers
	$(HERMES_PYTHON) benches/scale.py --peers-python $(PEERS_PYTHON) $(WHERE)

# listing, export, delete, prune and filtered search (1M messages) of the session store, ours vs
# hermes-agent on the same files (~20 min): target/bench/results/store_ops.json (PUBLISH=1: the
# one BENCHMARKS.md shows).
bench-store: hermes-python peers
	$(HERMES_PYTHON) benches/store_ops.py --peers-python $(PEERS_PYTHON) $(WHERE)

# hermes sessions list | stats | search | export | prune on 100k sessions, ours vs hermes-agent's own
# CLI (~45 min): target/bench/results/cli.json (PUBLISH=1: the one BENCHMARKS.md shows).
bench-cli: hermes-python peers
	$(HERMES_PYTHON) benches/cli.py --peers-python $(PEERS_PYTHON) $(WHERE)

# hermes migrate on 100k messages: file -> file, file -> PostgreSQL and back, beside a bare-SQL
# floor (~10 min, under scripts/postgres for the server): target/bench/results/migrate.json
# (PUBLISH=1: the one BENCHMARKS.md shows).
bench-migrate: hermes-python
	$(HERMES_PYTHON) benches/migrate.py $(WHERE)

# Search on PostgreSQL beside SQLite, 100k messages (~5 min, under scripts/postgres):
# target/bench/results/pg_search.json (PUBLISH=1: the one BENCHMARKS.md shows).
bench-pg-search: hermes-python
	$(HERMES_PYTHON) benches/pg_search.py $(WHERE)

# The gateway's per-turn overhead, ours vs hermes-agent (~1 min):
# target/bench/results/gateway_turn.json (PUBLISH=1: the one BENCHMARKS.md shows).
bench-gateway: hermes-python peers
	$(HERMES_PYTHON) benches/gateway_turn.py --peers-python $(PEERS_PYTHON) $(WHERE)

# The flush, 50 conversations, the reads and search over 1M messages on a throwaway PostgreSQL 15
# with fsync on (scripts/postgres), ours vs SQLAlchemySession and PostgresSaver and the
# one-statement floor (~30 min; QUICK=1 ~4 min): target/bench/results/postgres.json and its
# section (PUBLISH=1: benches/results/postgres.json, in BENCHMARKS.md after `make bench-report`).
bench-postgres: hermes-python peers-postgres
	HERMES_POSTGRES_DURABLE=1 scripts/postgres $(HERMES_PYTHON) benches/run.py --postgres \
		--peers-python $(PEERS_PG_PYTHON) $(if $(QUICK),--quick) $(WHERE)

# cargo bench: the criterion benches of the Rust core (benches/rust/core.rs) and the floor
# with its defaults (benches/rust/floor.rs). Criterion keeps its reports in target/criterion/.
bench-rust:
	cargo bench

# The interop tests against the real hermes-agent 0.19.0.
interop: hermes-python peers
	cd tests && HERMES_PEERS_PYTHON=$(PEERS_PYTHON) $(HERMES_PYTHON) -m pytest -q -p no:cacheprovider --rootdir .. -c ../pyproject.toml interop
