#!/usr/bin/env bash
# Creates (once) a peer venv, one of two requirement sets:
#
#   setup_peers.sh            the interop tests and the SQLite benchmarks: hermes-agent 0.19.0,
#                             the OpenAI Agents SDK and LangGraph's SQLite checkpointer, each
#                             pinned, plus matplotlib for the report's plots and pytest-benchmark
#                             to compare stored runs;
#   setup_peers.sh postgres   the PostgreSQL benchmark (`make bench-postgres`): the OpenAI Agents
#                             SDK's SQLAlchemySession on asyncpg and LangGraph's PostgresSaver on
#                             psycopg, in a venv of its own, so the first one is never rebuilt.
#
# Idempotent: a stamp file records the requirement set; a second run with the
# same set does nothing. Prints the venv's python on the last line.
#
#   PEERS_DIR      where the venv lives   (default: benches/.peers, or benches/.peers-pg for
#                  the postgres set)
#   PEERS_PYTHON   interpreter to build it (default: python3; hermes-agent
#                  0.19.0 needs CPython >= 3.11, < 3.14)
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
base_python="${PEERS_PYTHON:-python3}"

case "${1:-}" in
    "")
        peers_dir="${PEERS_DIR:-$here/.peers}"
        requirements=(
            "hermes-agent==0.19.0"
            "openai-agents==0.10.5"   # newest compatible with hermes-agent's openai==2.24.0 pin
            "langgraph-checkpoint-sqlite==3.1.2"
            "matplotlib==3.11.2"
            "pytest-benchmark==5.3.1"  # make bench-compare
        )
        imports="hermes_state, run_agent, agents, langgraph.checkpoint.sqlite, matplotlib, pytest_benchmark"
        ;;
    postgres)
        peers_dir="${PEERS_DIR:-$here/.peers-pg}"
        requirements=(
            "openai-agents[sqlalchemy]==0.10.5"  # the version the SQLite benchmarks measure
            "sqlalchemy[asyncio]==2.1.9"
            "asyncpg==0.32.0"
            "langgraph-checkpoint-postgres==3.2.0"
            "psycopg[binary]==3.3.9"
            "psycopg-pool==3.3.3"
        )
        imports="agents.extensions.memory.sqlalchemy_session, asyncpg, langgraph.checkpoint.postgres, psycopg_pool"
        ;;
    *)
        echo "usage: setup_peers.sh [postgres]" >&2
        exit 2
        ;;
esac
venv="$peers_dir/venv"
stamp="$venv/.requirements"
wanted="$(printf '%s\n' "${requirements[@]}")"

if [[ -x "$venv/bin/python" && -f "$stamp" && "$(cat "$stamp")" == "$wanted" ]] \
   && "$venv/bin/python" -c "import $imports" 2>/dev/null; then
    echo "peers: up to date in $venv" >&2
    echo "$venv/bin/python"
    exit 0
fi

"$base_python" - <<'PY'
import sys
if not ((3, 11) <= sys.version_info[:2] < (3, 14)):
    sys.exit(f"peers: hermes-agent 0.19.0 needs CPython 3.11-3.13, got {sys.version.split()[0]}; "
             "set PEERS_PYTHON to such an interpreter")
PY

mkdir -p "$peers_dir"
[[ -x "$venv/bin/python" ]] || "$base_python" -m venv "$venv"
"$venv/bin/python" -m pip install --quiet --disable-pip-version-check --upgrade pip
"$venv/bin/python" -m pip install --quiet --disable-pip-version-check "${requirements[@]}"
"$venv/bin/python" -c "import $imports"
printf '%s\n' "${requirements[@]}" > "$stamp"
echo "peers: installed into $venv" >&2
echo "$venv/bin/python"
