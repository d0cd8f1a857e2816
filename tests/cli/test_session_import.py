"""``hermes sessions import`` run as a real process: sessions back from the JSONL that export
writes of several sessions, into another real ``state.db``; batches past import_sessions'
limits, parents before children, nothing written for a file that is not one session a line,
the store's refusal named by its line, a second run skipping what is there."""

from __future__ import annotations

import json
import time
from pathlib import Path

from support.cli import as_json, hermes, one_line_failure

from hermes.state import SessionDB


def _export_all(home: Path, out: Path) -> list[dict[str, object]]:
    done = hermes(home, "sessions", "export", "-o", str(out))
    assert done.returncode == 0, done.stderr
    return [json.loads(line) for line in out.read_text().splitlines()]


def test_an_export_of_every_session_imports_into_another_store(
        hermes_home: Path, tmp_path: Path) -> None:
    now = time.time()
    with SessionDB(hermes_home / "state.db") as db:
        # More sessions than one import_sessions call takes; a compressed conversation
        # whose child is newer, so the export lists it before its parent.
        for n in range(620):
            db.create_session(f"s{n:04d}", "cli", started_at=now - 1000 + n)
            db.append_messages(f"s{n:04d}", [{"role": "user", "content": f"hello {n}"},
                                             {"role": "assistant", "content": f"hi {n}"}])
            db.end_session(f"s{n:04d}", "done")
        db.create_session("child", "cli", started_at=now, parent_session_id="s0000")
        db.append_messages("child", [{"role": "user", "content": "continued"}])
    exported = _export_all(hermes_home, tmp_path / "all.jsonl")
    assert len(exported) == 621
    assert [s["id"] for s in exported].index("child") < [s["id"] for s in exported].index("s0000")

    target = tmp_path / "target.db"
    got = as_json(hermes(hermes_home, "sessions", "import", str(tmp_path / "all.jsonl"),
                         "--db", str(target), "--json"))
    assert (got["imported"], got["skipped"], got["detached"]) == (621, 0, 0)
    with SessionDB(target) as db:
        assert db.session_count(include_archived=True) == 621
        assert db.get_session("child")["parent_session_id"] == "s0000"
        assert [m["content"] for m in db.get_messages("s0619")] == ["hello 619", "hi 619"]
        assert db.message_count() == 620 * 2 + 1

    again = hermes(hermes_home, "sessions", "import", str(tmp_path / "all.jsonl"),
                   "--db", str(target))
    assert again.returncode == 0, again.stderr
    assert again.stdout.strip() == "imported 0 sessions; skipped 621 the store has already"


def test_a_line_that_is_not_a_session_imports_nothing(hermes_home: Path, tmp_path: Path) -> None:
    source = tmp_path / "bad.jsonl"
    source.write_text(json.dumps({"id": "a", "source": "cli", "messages": []}) + "\n"
                      "\n" + "[1, 2]\n")
    target = tmp_path / "target.db"
    line = one_line_failure(hermes(hermes_home, "sessions", "import", str(source),
                                   "--db", str(target)))
    assert f"{source}:3: a list, not a session" in line and "nothing imported" in line
    source.write_text("{not json\n")
    assert ":1: not JSON" in one_line_failure(
        hermes(hermes_home, "sessions", "import", str(source), "--db", str(target)))
    with SessionDB(target) as db:
        assert db.session_count(include_archived=True) == 0


def test_an_entry_the_store_refuses_is_named_by_its_line(hermes_home: Path,
                                                          tmp_path: Path) -> None:
    source = tmp_path / "refused.jsonl"
    good = {"id": "fine", "source": "cli", "started_at": 1.0, "messages": []}
    source.write_text(json.dumps(good) + "\n" + json.dumps({"source": "cli"}) + "\n")
    target = tmp_path / "target.db"
    line = one_line_failure(hermes(hermes_home, "sessions", "import", str(source),
                                   "--db", str(target)))
    assert line.startswith(f"hermes: {source}:2: ") and line.endswith("nothing imported")
    with SessionDB(target) as db:
        assert db.get_session("fine") is None  # the batch is one transaction


def test_a_missing_file_is_one_line(hermes_home: Path, tmp_path: Path) -> None:
    line = one_line_failure(hermes(hermes_home, "sessions", "import",
                                   str(tmp_path / "nowhere.jsonl")))
    assert "nowhere.jsonl" in line
