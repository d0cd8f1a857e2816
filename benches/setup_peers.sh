#!/usr/bin/env bash
# Creates (once) the peer venv used by the interop tests and the benchmarks:
# hermes-agent 0.19.0, the OpenAI Agents SDK and LangGraph's SQLite
# checkpointer, each pinned, plus matplotlib for the report's plots and
# pytest-benchmark to compare stored runs.
#
# Idempotent: a stamp file records the requirement set; a second run with the
# same set does nothing. Prints the venv's python on the last line.
#
#   PEERS_DIR      where the venv lives   (default: benches/.peers)
#   PEERS_PYTHON   interpreter to build it (default: python3; hermes-agent
#                  0.19.0 needs CPython >= 3.11, < 3.14)
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
peers_dir="${PEERS_DIR:-$here/.peers}"
venv="$peers_dir/venv"
base_python="${PEERS_PYTHON:-python3}"

requirements=(
    "hermes-agent==0.19.0"
    "openai-agents==0.10.5"   # newest compatible with hermes-agent's openai==2.24.0 pin
    "langgraph-checkpoint-sqlite==3.1.2"
    "matplotlib==3.11.2"
    "pytest-benchmark==5.3.1"  # make bench-compare
)
stamp="$venv/.requirements"
wanted="$(printf '%s\n' "${requirements[@]}")"

if [[ -x "$venv/bin/python" && -f "$stamp" && "$(cat "$stamp")" == "$wanted" ]] \
   && "$venv/bin/python" -c "import hermes_state, run_agent, agents, langgraph.checkpoint.sqlite, matplotlib, pytest_benchmark" 2>/dev/null; then
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
"$venv/bin/python" -c "import hermes_state, run_agent, agents, langgraph.checkpoint.sqlite, matplotlib, pytest_benchmark"
printf '%s\n' "${requirements[@]}" > "$stamp"
echo "peers: installed into $venv" >&2
echo "$venv/bin/python"
