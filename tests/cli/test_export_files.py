"""``hermes sessions export --format md|qmd`` as hermes-agent writes it, run as a real process on
a real ``state.db``: a file a session in a directory, an entry each appended to its
``manifest.jsonl`` (hermes-agent's fields, the file's SHA-256), files kept unless ``--force``;
one session to a directory, a file or stdout; and ``--delete-after-verified``, which reads the
written file back and deletes the session only when it holds the session as stored."""

from __future__ import annotations

import hashlib
import json
import os
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from support.cli import hermes, one_line_failure

from hermes.state import SessionDB

DAY = 86400.0
MANIFEST_FIELDS = {"session_id", "lineage_session_ids", "path", "format", "message_count",
                   "sha256", "exported_at"}


@pytest.fixture
def store(hermes_home: Path) -> Path:
    """``old`` (titled, 100 days, ended, two messages), ``plain`` (untitled, 50 days, ended)
    and ``live`` (1 day, running)."""
    path = hermes_home / "state.db"
    now = time.time()
    with SessionDB(path) as db:
        db.create_session("old", "telegram", started_at=now - 100 * DAY,
                          title="Cat facts: part 1/2")
        db.append_messages("old", [{"role": "user", "content": "tell me about cats"},
                                   {"role": "assistant", "content": "they purr"}])
        db.end_session("old", "session_reset")
        db.create_session("plain", "local", started_at=now - 50 * DAY)
        db.append_message("plain", "user", "an untitled question")
        db.end_session("plain", "session_reset")
        db.create_session("live", "local", started_at=now - DAY)
        db.append_message("live", "user", "a running question")
    return path


def export(home: Path, *argv: str) -> str:
    done = hermes(home, "sessions", "export", *argv)
    assert done.returncode == 0, done.stderr
    return done.stderr


def manifest(folder: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in (folder / "manifest.jsonl").read_text().splitlines()]


def test_several_sessions_are_a_file_each_with_a_manifest_entry(hermes_home: Path, store: Path,
                                                                tmp_path: Path) -> None:
    folder = tmp_path / "exports"
    said = export(hermes_home, "--format", "md", "--older-than", "30", "-o", str(folder))
    assert f"wrote 2 Markdown files to {folder}" in said
    names = ["old-cat-facts-part-1-2.md", "plain-session.md"]  # hermes-agent's names
    assert sorted(p.name for p in folder.iterdir()) == ["manifest.jsonl", *names]
    assert folder.stat().st_mode & 0o777 == 0o700
    assert all(p.stat().st_mode & 0o777 == 0o600 for p in folder.iterdir())
    entries = manifest(folder)
    assert [e["session_id"] for e in entries] == ["old", "plain"]  # oldest first
    for entry, name in zip(entries, names):
        assert set(entry) == MANIFEST_FIELDS and list(entry) == sorted(entry)
        assert entry["path"] == str(folder / name) and entry["format"] == "md"
        assert entry["sha256"] == hashlib.sha256((folder / name).read_bytes()).hexdigest()
        assert entry["lineage_session_ids"] == [entry["session_id"]]
        assert abs(entry["exported_at"] - time.time()) < 120
    assert [e["message_count"] for e in entries] == [2, 1]
    text = (folder / names[0]).read_text()
    assert text.startswith("# Session old\n") and "they purr" in text
    assert "- Session id: `old`\n- Exported messages: `2`\n" in text

    # Again: both kept (no entry appended); --force writes them anew, an entry each.
    (folder / names[0]).write_text("mine\n")
    said = export(hermes_home, "--format", "md", "--older-than", "30", "-o", str(folder))
    assert "wrote 0 Markdown files" in said and "kept 2 files already there" in said
    assert (folder / names[0]).read_text() == "mine\n" and len(manifest(folder)) == 2
    said = export(hermes_home, "--format", "md", "--older-than", "30", "-o", str(folder),
                  "--force")
    assert "wrote 2 Markdown files" in said and "they purr" in (folder / names[0]).read_text()
    assert [e["session_id"] for e in manifest(folder)] == ["old", "plain", "old", "plain"]


def test_every_session_as_quarto_markdown_goes_to_the_default_directory(
        hermes_home: Path, store: Path) -> None:
    said = export(hermes_home, "--format", "qmd")
    folder = hermes_home / "session-exports"
    assert f"wrote 3 Quarto Markdown files to {folder}" in said
    assert sorted(p.name for p in folder.iterdir()) == [
        "live-session.qmd", "manifest.jsonl", "old-cat-facts-part-1-2.qmd", "plain-session.qmd"]
    header = (folder / "old-cat-facts-part-1-2.qmd").read_text().split("\n---\n")[0]
    assert '\ntitle: "Cat facts: part 1/2"' in header and '\nsession-id: "old"' in header
    assert {e["format"] for e in manifest(folder)} == {"qmd"}


def test_one_session_goes_to_a_directory_a_file_or_stdout(hermes_home: Path, store: Path,
                                                          tmp_path: Path) -> None:
    # Without -o, as hermes-agent: the default directory, with the manifest.
    said = export(hermes_home, "old", "--format", "md")
    default = hermes_home / "session-exports"
    assert f"wrote 1 Markdown file to {default} (old-cat-facts-part-1-2.md)" in said
    assert [e["session_id"] for e in manifest(default)] == ["old"]
    # Kept the second time, and said where.
    said = export(hermes_home, "--session-id", "old", "--format", "md")
    assert f"kept {default / 'old-cat-facts-part-1-2.md'}, already there" in said
    # A path ending in / is a directory, made if missing; so is an existing directory.
    slash = tmp_path / "new"
    export(hermes_home, "old", "--format", "md", "-o", f"{slash}/")
    assert sorted(p.name for p in slash.iterdir()) == ["manifest.jsonl",
                                                       "old-cat-facts-part-1-2.md"]
    export(hermes_home, "plain", "--format", "md", "-o", str(slash))
    assert len(manifest(slash)) == 2
    # Any other path is the file itself, with no manifest; - is stdout.
    target = tmp_path / "talk.md"
    assert f"wrote 2 messages to {target}" in export(hermes_home, "old", "--format", "md",
                                                     "-o", str(target))
    assert not (tmp_path / "manifest.jsonl").exists()
    done = hermes(hermes_home, "sessions", "export", "old", "--format", "md", "-o", "-")
    assert done.returncode == 0
    # The same document everywhere but for its time of export.
    stdout, in_file = done.stdout, target.read_text()
    assert [line for line in stdout.splitlines() if "`" not in line] == [
        line for line in in_file.splitlines() if "`" not in line]


def test_file_names_are_the_id_and_the_title_as_hermes_agent_names_them(
        hermes_home: Path, tmp_path: Path) -> None:
    with SessionDB(hermes_home / "state.db") as db:
        db.create_session("a/b", "cli", title="  Über: Ärger & more  ", started_at=1.0)
        db.create_session("a_b", "cli", title="Über: Ärger & more", started_at=2.0)
        db.create_session("c", "cli", title="???", started_at=3.0)
    folder = tmp_path / "out"
    export(hermes_home, "--format", "md", "-o", str(folder))
    # The id's "/" as "_"; the title's runs of other characters as one "-", trimmed, lower
    # case; nothing left: "session". Two sessions that would share a name do not.
    assert sorted(p.name for p in folder.glob("*.md")) == [
        "a_b-ber-rger-more.md", "a_b-ber-rger-more_.md", "c-session.md"]


# -- --delete-after-verified -------------------------------------------------------------


def test_a_verified_export_deletes_its_session(hermes_home: Path, store: Path,
                                               tmp_path: Path) -> None:
    folder = tmp_path / "kept-forever"
    said = export(hermes_home, "old", "--format", "md", "-o", f"{folder}/",
                  "--delete-after-verified", "--yes")
    path = folder / "old-cat-facts-part-1-2.md"
    assert f"verified {path} and deleted session old" in said
    with SessionDB(store) as db:
        assert db.get_session("old") is None and db.get_session("plain") is not None
    assert "they purr" in path.read_text() and manifest(folder)[0]["session_id"] == "old"
    # To a file, as Quarto Markdown.
    target = tmp_path / "plain.qmd"
    said = export(hermes_home, "plain", "--format", "qmd", "-o", str(target),
                  "--delete-after-verified", "-y")
    assert f"verified {target} and deleted session plain" in said
    with SessionDB(store) as db:
        assert db.get_session("plain") is None


def test_an_export_that_is_not_kept_deletes_nothing(hermes_home: Path, store: Path) -> None:
    line = one_line_failure(hermes(hermes_home, "sessions", "export", "old", "--format", "md",
                                   "-o", os.devnull, "--delete-after-verified", "--yes"))
    assert line == f"hermes: not deleting session old: {os.devnull} has no checksum line; " \
                   "export it again to retry"
    with SessionDB(store) as db:
        assert db.get_session("old") is not None


def test_a_file_kept_from_before_deletes_nothing(hermes_home: Path, store: Path,
                                                 tmp_path: Path) -> None:
    export(hermes_home, "old", "--format", "md", "-o", str(tmp_path))
    line = one_line_failure(hermes(hermes_home, "sessions", "export", "old", "--format", "md",
                                   "-o", str(tmp_path), "--delete-after-verified", "--yes"))
    assert "not deleting session old: its export was kept" in line and "--force" in line
    with SessionDB(store) as db:
        assert db.get_session("old") is not None
    said = export(hermes_home, "old", "--format", "md", "-o", str(tmp_path), "--force",
                  "--delete-after-verified", "--yes")
    assert "deleted session old" in said


def _read_then_write_back(fifo: Path, change: Callable[[str], str]) -> threading.Thread:
    """Reads what the export writes into ``fifo``, calls ``change(text)`` and writes back
    what it returns when the command reads the file back: a file changed on disk, or a
    session changed in the store, between the export and its verification."""
    def run() -> None:
        with open(fifo, encoding="utf-8") as reader:
            text = reader.read()
        changed = change(text)
        with open(fifo, "w", encoding="utf-8") as writer:
            writer.write(changed)

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    return thread


def test_a_session_changed_since_the_export_is_not_deleted(hermes_home: Path, store: Path,
                                                           tmp_path: Path) -> None:
    fifo = tmp_path / "export.md"
    os.mkfifo(fifo)

    def a_message_arrives(text: str) -> str:
        with SessionDB(store) as db:
            db.append_message("old", "user", "one more thing")
        return text

    thread = _read_then_write_back(fifo, a_message_arrives)
    line = one_line_failure(hermes(hermes_home, "sessions", "export", "old", "--format", "md",
                                   "-o", str(fifo), "--delete-after-verified", "--yes"))
    thread.join(10)
    assert "not deleting session old: session old has 3 messages now" in line
    with SessionDB(store) as db:
        assert db.live_message_count("old") == 3


def test_a_file_changed_after_it_was_written_is_not_deleted(hermes_home: Path, store: Path,
                                                            tmp_path: Path) -> None:
    fifo = tmp_path / "export.md"
    os.mkfifo(fifo)
    thread = _read_then_write_back(fifo, lambda text: text.replace("purr", "bark"))
    line = one_line_failure(hermes(hermes_home, "sessions", "export", "old", "--format", "md",
                                   "-o", str(fifo), "--delete-after-verified", "--yes"))
    thread.join(10)
    assert f"the checksum in {fifo} does not match its content" in line
    with SessionDB(store) as db:
        assert db.get_session("old") is not None


@pytest.mark.parametrize(("argv", "words"), [
    (["old", "--format", "md", "--delete-after-verified"], "add --yes to go ahead"),
    (["old", "--delete-after-verified", "--yes"], "use --format md or qmd"),
    (["old", "--format", "md", "--only", "user-prompts", "--delete-after-verified", "--yes"],
     "use --format md or qmd"),
    (["--older-than", "30", "--format", "md", "--delete-after-verified", "--yes"],
     "deletes one session: name it with ID"),
    (["old", "--format", "md", "-o", "-", "--delete-after-verified", "--yes"],
     "name a file or directory with -o, not -"),
    (["old", "--format", "md", "--lineage", "logical", "--delete-after-verified", "--yes"],
     "drop --lineage logical"),
])
def test_delete_after_verified_refuses_what_it_cannot_check(
        hermes_home: Path, store: Path, argv: list[str], words: str) -> None:
    line = one_line_failure(hermes(hermes_home, "sessions", "export", *argv), status=2)
    assert words in line
    with SessionDB(store) as db:
        assert db.session_count(include_archived=True) == 3
