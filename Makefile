# Benchmarks and the peer venv. See BENCHMARKS.md and benches/run.py.
#   HERMES_PYTHON   interpreter with hermes installed (default: python3)
HERMES_PYTHON ?= python3
PEERS_PYTHON  := benches/.peers/venv/bin/python

.PHONY: peers bench bench-quick bench-report bench-compare bench-scale interop

# The peers' own venv: hermes-agent 0.19.0, openai-agents, langgraph-checkpoint-sqlite, matplotlib.
peers:
	bash benches/setup_peers.sh

# Full run (3 rounds, FULL and NORMAL): benches/results/*.json, BENCHMARKS.md, benches/plots/*.png.
bench: peers
	$(HERMES_PYTHON) benches/run.py

# Small sizes, 1 round (< 3 minutes): benches/results/latest-quick.{json,md}.
bench-quick: peers
	$(HERMES_PYTHON) benches/run.py --quick

# Re-render BENCHMARKS.md and the plots from the latest full results file.
bench-report:
	$(PEERS_PYTHON) benches/report.py benches/results/latest.json

# The stored runs side by side, operation by operation, with pytest-benchmark's own
# compare (every run also writes benches/results/pytest-benchmark/<run>.json).
# Narrow it with RUNS (relative to benches/results), e.g. RUNS="pytest-benchmark/*1b59709*.json".
# (Run from benches/results: pytest-benchmark would otherwise load this project's pytest setup.)
RUNS ?= pytest-benchmark/*.json
bench-compare: peers
	cd benches/results && $(abspath $(PEERS_PYTHON)) -m pytest_benchmark compare \
		--group-by=group --sort=name --columns=median,iqr,min,max,rounds $(RUNS)

# Search over 1M messages and a db growing to 100k sessions, ours vs hermes-agent
# (~10 min; --quick: ~1 min): benches/results/scale.json, benches/plots/scale_vs_sessions.png.
# BENCHMARKS.md shows it after the next `make bench` or `make bench-report`.
bench-scale: peers
	$(HERMES_PYTHON) benches/scale.py

# The interop tests against the real hermes-agent 0.19.0.
interop: peers
	cd tests && $(HERMES_PYTHON) -m pytest -q -p no:cacheprovider --rootdir .. -c ../pyproject.toml interop
