"""Our Markdown exports as hermes-agent 0.19.0's own export code reads and names them: its
``verify_export_file`` accepts our file (and refuses it changed), its file for the same
session has our file's name, and its ``manifest.jsonl`` entry our entry's fields.

hermes-agent runs in its own venv (see ``test_hermes_agent_interop.py``).
"""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path
from typing import Any

import pytest
from support.cli import hermes
from test_hermes_agent_interop import PEER_PYTHON, SKIP_REASON

from hermes.state import SessionDB

pytestmark = pytest.mark.skipif(PEER_PYTHON is None, reason=SKIP_REASON)

# Run in the peer venv: hermes-agent's verification of each file named, and its own export
# of the session into a directory of its own.
_THEIR_SIDE = """
import json, sys
from pathlib import Path
from hermes_cli.session_export_md import (
    append_manifest_entry, verify_export_file, write_session_markdown)
request = json.load(sys.stdin)
session = request["session"]
verified = [verify_export_file(path, session) for path in request["verify"]]
path = write_session_markdown(session, request["folder"], fmt="md")
append_manifest_entry(request["folder"], session, path, fmt="md")
print(json.dumps({"verified": verified, "name": Path(path).name}))
"""


def theirs(home: Path, **request: Any) -> dict[str, Any]:
    assert PEER_PYTHON is not None
    done = subprocess.run([PEER_PYTHON, "-c", _THEIR_SIDE], input=json.dumps(request),
                          capture_output=True, text=True, timeout=180,
                          env={**os.environ, "HERMES_HOME": str(home)})
    assert done.returncode == 0, done.stderr
    answer: dict[str, Any] = json.loads(done.stdout)
    return answer


def test_hermes_agent_verifies_names_and_lists_our_markdown_exports(
        hermes_home: Path, tmp_path: Path) -> None:
    with SessionDB(hermes_home / "state.db") as db:
        db.create_session("s1", "cli", title="Cat facts: part 1/2")
        db.append_messages("s1", [{"role": "user", "content": "tell me about cats"},
                                  {"role": "assistant", "content": "they purr"}])
        session = json.loads(json.dumps(db.export_session("s1"), default=str))
    ours = tmp_path / "ours"
    done = hermes(hermes_home, "sessions", "export", "s1", "--format", "md", "-o", f"{ours}/")
    assert done.returncode == 0, done.stderr
    [our_file] = ours.glob("*.md")
    changed = tmp_path / "changed.md"
    changed.write_text(our_file.read_text().replace("purr", "bark"))

    answer = theirs(hermes_home, session=session, verify=[str(our_file), str(changed)],
                    folder=str(tmp_path / "theirs"))
    assert answer["verified"] == [[True, "ok"], [False, "sha256 mismatch"]]
    assert answer["name"] == our_file.name
    [our_entry] = [json.loads(line) for line in (ours / "manifest.jsonl").read_text().splitlines()]
    [their_entry] = [json.loads(line) for line in
                     (tmp_path / "theirs" / "manifest.jsonl").read_text().splitlines()]
    assert list(our_entry) == list(their_entry)  # the same fields, in the same order
    assert {k: v for k, v in our_entry.items() if k not in ("path", "sha256", "exported_at")} \
        == {k: v for k, v in their_entry.items() if k not in ("path", "sha256", "exported_at")}
