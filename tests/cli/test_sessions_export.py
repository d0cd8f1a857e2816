"""``hermes sessions export`` run as a real process on a real ``state.db``: one session, the
sessions filters match, every session; JSONL (read back by ``import_sessions``), Markdown,
Quarto Markdown, HTML (everything escaped) and agent traces (redacted by default); user
prompts only; whole compression lineages; what it refuses, in one line."""

from __future__ import annotations

import json
import re
import time
from html.parser import HTMLParser
from pathlib import Path
from typing import Any

import pytest
from support.cli import hermes, one_line_failure

from hermes.state import SessionDB

DAY = 86400.0
SECRET = "sk-proj-ABCDEFGHIJKLMNOPQRSTUVWX0123"
HOSTILE = "<script>alert('x')</script> & \"quotes\""
TOOL_CALL = {"id": "c1", "type": "function",
             "function": {"name": "terminal",
                          "arguments": json.dumps({"command": "echo </pre><img src=x>"})}}


@pytest.fixture
def store(hermes_home: Path) -> Path:
    """``old`` (telegram, 100 days, ended, with a tool round, a secret and markup), ``archived``
    (local, 50 days, ended and archived), ``live`` (local, 1 day, still running), and a
    compressed conversation ``root`` -> ``tip`` (cli, 10 days, both ended)."""
    path = hermes_home / "state.db"
    now = time.time()
    with SessionDB(path) as db:
        db.create_session("old", "telegram", started_at=now - 100 * DAY, title=HOSTILE,
                          model="model-a", cwd="/srv/project", git_branch="main",
                          system_prompt=f"use key {SECRET}")
        db.append_messages("old", [
            {"role": "user", "content": f"my key is {SECRET} and {HOSTILE}"},
            {"role": "assistant", "content": None, "tool_calls": [TOOL_CALL]},
            {"role": "tool", "tool_call_id": "c1", "tool_name": "terminal",
             "content": "```\nfile.txt\n```"},
            {"role": "assistant", "content": "It is file.txt"},
        ])
        db.end_session("old", "session_reset")
        db.create_session("archived", "local", started_at=now - 50 * DAY)
        db.append_message("archived", "user", "an archived question")
        db.end_session("archived", "session_reset")
        db.set_session_archived("archived", True)
        db.create_session("live", "local", started_at=now - DAY)
        db.append_message("live", "user", "a running question")
        db.create_session("root", "cli", started_at=now - 10 * DAY, title="Long talk")
        db.append_message("root", "user", "first part")
        db.update_session("root", end_reason="compression", ended_at=now - 9 * DAY)
        db.create_session("tip", "cli", started_at=now - 9 * DAY, parent_session_id="root")
        db.append_message("tip", "user", "second part")
        db.end_session("tip", "session_reset")
    return path


def lines(text: str) -> list[Any]:
    return [json.loads(line) for line in text.splitlines()]


def exported(home: Path, *argv: str) -> str:
    done = hermes(home, "sessions", "export", *argv)
    assert done.returncode == 0, done.stderr
    return done.stdout


# -- what is exported --------------------------------------------------------------------


def test_every_session_as_jsonl_is_hermes_agents_backup_form(hermes_home: Path, store: Path,
                                                           tmp_path: Path) -> None:
    target = tmp_path / "all.jsonl"
    done = hermes(hermes_home, "sessions", "export", "-o", str(target))
    assert done.returncode == 0, done.stderr
    assert f"wrote 5 sessions to {target}" in done.stderr
    assert target.stat().st_mode & 0o777 == 0o600
    sessions = lines(target.read_text())
    # Every session, running and archived ones too, newest first, each with its messages.
    assert [s["id"] for s in sessions] == ["live", "tip", "root", "archived", "old"]
    with SessionDB(store) as db:
        assert sessions[-1] == json.loads(json.dumps(db.export_session("old"), default=str))
    # What import_sessions reads back, whole.
    with SessionDB(tmp_path / "copy.db") as copy:
        assert copy.import_sessions(sessions)["ok"]
        assert [m["content"] for m in copy.get_messages("tip")] == ["second part"]
        assert copy.get_session("old")["title"] == HOSTILE


def test_filters_select_ended_sessions_archived_ones_included(hermes_home: Path,
                                                              store: Path) -> None:
    sessions = lines(exported(hermes_home, "--older-than", "30"))
    assert [s["id"] for s in sessions] == ["old", "archived"]  # oldest first, as prune's
    assert [s["id"] for s in lines(exported(hermes_home, "--source", "local"))] == ["archived"]
    assert [s["id"] for s in lines(exported(hermes_home, "--title", "long"))] == ["root"]
    done = hermes(hermes_home, "sessions", "export", "--source", "nowhere")
    assert done.returncode == 0 and done.stdout == ""
    assert "no sessions match (source 'nowhere'); nothing exported" in done.stderr


def test_an_empty_store_exports_nothing_and_says_so(hermes_home: Path) -> None:
    SessionDB(hermes_home / "state.db").close()
    done = hermes(hermes_home, "sessions", "export")
    assert done.returncode == 0 and done.stdout == ""
    assert "no sessions are stored; nothing exported" in done.stderr
    line = one_line_failure(hermes(hermes_home, "sessions", "export", "--db",
                                   str(hermes_home / "elsewhere.db")))
    assert "no session database" in line


def test_a_dry_run_lists_what_it_would_export_and_writes_nothing(hermes_home: Path,
                                                                 store: Path,
                                                                 tmp_path: Path) -> None:
    target = tmp_path / "never.jsonl"
    done = hermes(hermes_home, "sessions", "export", "--older-than", "30", "--dry-run", "-o",
                  str(target))
    assert done.returncode == 0, done.stderr
    header, *rows = done.stdout.splitlines()
    assert header.split("\t")[0] == "id" and [r.split("\t")[0] for r in rows] == ["old",
                                                                                 "archived"]
    assert not target.exists()


def test_one_session_by_id_or_title_is_its_conversation(hermes_home: Path,
                                                        store: Path) -> None:
    by_id = lines(exported(hermes_home, "old"))
    assert by_id == lines(exported(hermes_home, "--session-id", "old"))
    assert by_id == lines(exported(hermes_home, HOSTILE))
    with SessionDB(store) as db:
        assert by_id == json.loads(json.dumps(db.get_messages_as_conversation("old")))
    assert by_id[1]["tool_calls"] == [TOOL_CALL]


def test_a_compressed_conversation_exports_whole_with_lineage_logical(hermes_home: Path,
                                                                      store: Path) -> None:
    assert [m["content"] for m in lines(exported(hermes_home, "tip"))] == ["second part"]
    whole = lines(exported(hermes_home, "tip", "--lineage", "logical"))
    assert [m["content"] for m in whole] == ["first part", "second part"]
    # In bulk, each chain once, with its segments.
    sessions = lines(exported(hermes_home, "--source", "cli", "--lineage", "logical"))
    assert len(sessions) == 1 and sessions[0]["lineage_session_ids"] == ["root", "tip"]
    assert [m["content"] for m in sessions[0]["messages"]] == ["first part", "second part"]


def test_user_prompts_only(hermes_home: Path, store: Path) -> None:
    prompts = lines(exported(hermes_home, "--only", "user-prompts", "--older-than", "30"))
    assert [(p["session_id"], p["index"], p["text"]) for p in prompts] == [
        ("old", 1, f"my key is {SECRET} and {HOSTILE}"), ("archived", 1, "an archived question")]
    assert all(p["role"] == "user" and p["created_at"].endswith("Z") for p in prompts)
    text = exported(hermes_home, "old", "--only", "user-prompts", "--format", "md")
    assert text.startswith("# User prompts\n") and "## Session old" in text
    assert "### 1. " in text and "It is file.txt" not in text


# -- formats -----------------------------------------------------------------------------


class Page(HTMLParser):
    """What a browser would build: the elements, their attributes, and the text."""

    def __init__(self) -> None:
        super().__init__()
        self.tags: list[str] = []
        self.attributes: list[tuple[str, str | None]] = []
        self.text: list[str] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self.tags.append(tag)
        self.attributes += attrs

    def handle_data(self, data: str) -> None:
        self.text.append(data)


def parsed(html: str) -> Page:
    page = Page()
    page.feed(html)
    page.close()
    return page


def test_html_escapes_everything_from_the_store(hermes_home: Path, store: Path) -> None:
    html = exported(hermes_home, "old", "--format", "html")
    page = parsed(html)
    # The hostile text is text: no element, no attribute came from it.
    assert "script" not in page.tags and "img" not in page.tags
    assert not any(name.startswith("on") or name == "src" for name, _ in page.attributes)
    text = "".join(page.text)
    assert HOSTILE in text and "echo </pre><img src=x>" in text  # shown, as written
    assert "&lt;script&gt;" in html and "&quot;quotes&quot;" in html
    assert "Content-Security-Policy" in html and "default-src 'none'" in html
    assert "http://" not in html and "https://" not in html  # it loads nothing


def test_html_of_several_sessions_links_to_each(hermes_home: Path, store: Path,
                                                tmp_path: Path) -> None:
    target = tmp_path / "all.html"
    done = hermes(hermes_home, "sessions", "export", "--format", "html", "-o", str(target))
    assert done.returncode == 0, done.stderr
    page = parsed(target.read_text())
    links = [value for name, value in page.attributes if name == "href"]
    ids = [value for name, value in page.attributes if name == "id"]
    assert len(links) == 5 and [link.lstrip("#") for link in links] == ids
    assert page.tags.count("section") == 5
    # A compression chain is one section; the link to each of its sessions lands there.
    page = parsed(exported(hermes_home, "--source", "cli", "--lineage", "logical", "--format",
                           "html"))
    links = [value for name, value in page.attributes if name == "href"]
    ids = [value for name, value in page.attributes if name == "id"]
    assert len(links) == 2 and all(link.lstrip("#") in ids for link in links)
    assert page.tags.count("section") == 1


def test_markdown_fences_hold_whatever_the_tool_printed(hermes_home: Path,
                                                       store: Path) -> None:
    text = exported(hermes_home, "old", "--format", "md", "-o", "-")
    assert text.startswith("# Session old\n")
    assert "````\n```\nfile.txt\n```\n````" in text  # a longer fence around the backticks
    # It ends with its own check, in hermes-agent's lines.
    verification = text[text.index("\n## Export verification\n"):]
    assert "- Session id: `old`\n- Exported messages: `4`\n" in verification
    assert re.search(r"^- SHA256 of exported body: `[0-9a-f]{64}`$", verification, re.MULTILINE)


def test_quarto_markdown_has_a_yaml_header(hermes_home: Path, store: Path) -> None:
    text = exported(hermes_home, "old", "--format", "qmd", "-o", "-")
    header, _, body = text.removeprefix("---\n").partition("\n---\n")
    fields = dict(line.split(": ", 1) for line in header.splitlines())
    assert json.loads(fields["title"]) == HOSTILE and json.loads(fields["session-id"]) == "old"
    assert body.lstrip().startswith("# Session old")


def test_a_trace_is_claude_code_jsonl_with_secrets_redacted(hermes_home: Path,
                                                            store: Path) -> None:
    turns = lines(exported(hermes_home, "old", "--format", "trace"))
    assert [t["type"] for t in turns] == ["user", "assistant", "user", "assistant"]
    assert all(t["sessionId"] == "old" and t["cwd"] == "/srv/project" and
               t["gitBranch"] == "main" for t in turns)
    assert [t["parentUuid"] for t in turns] == [None, *(t["uuid"] for t in turns[:-1])]
    user, call, result, answer = (t["message"] for t in turns)
    assert SECRET not in json.dumps(turns) and "sk-proj-[REDACTED]" in user["content"]
    assert call["content"] == [{"type": "tool_use", "id": "c1", "name": "terminal",
                                "input": {"command": "echo </pre><img src=x>"}}]
    assert result["content"][0] == {"type": "tool_result", "tool_use_id": "c1",
                                    "content": "```\nfile.txt\n```"}
    assert answer == {"role": "assistant", "model": "model-a",
                      "content": [{"type": "text", "text": "It is file.txt"}]}
    # The same export twice is the same file; --no-redact keeps what was said.
    assert lines(exported(hermes_home, "old", "--format", "trace")) == turns
    assert SECRET in exported(hermes_home, "old", "--format", "trace", "--no-redact")


def test_a_trace_of_several_sessions_is_a_file_each(hermes_home: Path, store: Path,
                                                    tmp_path: Path) -> None:
    folder = tmp_path / "traces"
    done = hermes(hermes_home, "sessions", "export", "--format", "trace", "--older-than", "30",
                  "-o", str(folder))
    assert done.returncode == 0, done.stderr
    assert sorted(p.name for p in folder.iterdir()) == ["archived.trace.jsonl",
                                                        "old.trace.jsonl"]
    assert all(p.stat().st_mode & 0o777 == 0o600 for p in folder.iterdir())
    (folder / "old.trace.jsonl").write_text("mine\n")
    (folder / "archived.trace.jsonl").unlink()
    again = hermes(hermes_home, "sessions", "export", "--format", "trace", "--older-than", "30",
                   "-o", str(folder))
    assert "wrote 1 session trace" in again.stderr and "kept 1 file" in again.stderr
    assert (folder / "old.trace.jsonl").read_text() == "mine\n"
    forced = hermes(hermes_home, "sessions", "export", "--format", "trace", "--older-than",
                    "30", "-o", str(folder), "--force")
    assert "wrote 2 session traces" in forced.stderr
    assert lines((folder / "old.trace.jsonl").read_text())[0]["sessionId"] == "old"
    # One session into a directory that exists: its file there.
    assert hermes(hermes_home, "sessions", "export", "live", "--format", "trace", "-o",
                  str(folder)).returncode == 0
    assert lines((folder / "live.trace.jsonl").read_text())[0]["sessionId"] == "live"
    # Without -o: $HERMES_HOME/session-exports, as hermes-agent's.
    assert hermes(hermes_home, "sessions", "export", "--format", "trace", "--source",
                  "local").returncode == 0
    assert (hermes_home / "session-exports" / "archived.trace.jsonl").exists()


def test_a_bare_trace_is_the_latest_session_by_last_activity(hermes_home: Path) -> None:
    now = time.time()
    with SessionDB(hermes_home / "state.db") as db:
        db.create_session("started-last", "cli", started_at=now - 100)
        db.append_message("started-last", "user", "early words", timestamp=now - 100)
        db.create_session("active-last", "cli", started_at=now - 1000)
        db.append_message("active-last", "user", "latest words", timestamp=now - 10)
        db.create_session("hidden", "cli", started_at=now - 5)
        db.append_message("hidden", "user", "archived words", timestamp=now - 5)
        db.set_session_archived("hidden", True)
    done = hermes(hermes_home, "sessions", "export", "--format", "trace")
    assert done.returncode == 0, done.stderr
    assert {t["sessionId"] for t in lines(done.stdout)} == {"active-last"}
    assert "exporting session active-last, the latest by last activity" in done.stderr
    dry = hermes(hermes_home, "sessions", "export", "--format", "trace", "--dry-run")
    assert [row.split("\t")[0] for row in dry.stdout.splitlines()[1:]] == ["active-last"]
    with SessionDB(hermes_home / "state.db") as db:
        db.delete_sessions(["started-last", "active-last"])
    done = hermes(hermes_home, "sessions", "export", "--format", "trace")
    assert done.returncode == 0 and done.stdout == ""
    assert "no sessions are stored (archived ones aside); nothing exported" in done.stderr


def test_redact_takes_secrets_out_of_any_format(hermes_home: Path, store: Path) -> None:
    for argv in (["old"], ["--older-than", "30"], ["old", "--format", "md", "-o", "-"],
                 ["old", "--format", "html"], ["--only", "user-prompts"]):
        plain, redacted = exported(hermes_home, *argv), exported(hermes_home, *argv,
                                                                 "--redact")
        assert SECRET in plain, argv
        assert SECRET not in redacted and "[REDACTED]" in redacted, argv


# -- what it refuses ---------------------------------------------------------------------


@pytest.mark.parametrize(("argv", "words"), [
    (["old", "--older-than", "30"], "one session (ID) or filters, not both"),
    (["old", "--session-id", "live"], "name two sessions"),
    (["old", "--no-redact"], "--no-redact is for --format trace"),
    (["old", "--format", "trace", "--redact", "--no-redact"], "contradict"),
    (["--only", "user-prompts", "--format", "html"], "writes jsonl or md, not html"),
    (["old", "--force"], "--force replaces files in an export directory"),
    (["old", "--format", "md", "-o", "x.md", "--force"], "a single output file is always"),
    (["--format", "trace", "--source", "local", "-o", "-"], "name a directory with -o"),
    (["--format", "md", "-o", "-"], "md of several sessions is a file each"),
    (["--format", "pdf"], "invalid choice: 'pdf'"),
    (["--older-than", "soon"], "neither a duration nor a date"),
])
def test_flags_that_do_not_go_together_are_one_line_usage_errors(
        hermes_home: Path, store: Path, argv: list[str], words: str) -> None:
    line = one_line_failure(hermes(hermes_home, "sessions", "export", *argv), status=2)
    assert words in line


def test_an_unknown_session_says_that_id_is_not_the_output(hermes_home: Path,
                                                           store: Path) -> None:
    line = one_line_failure(hermes(hermes_home, "sessions", "export", "backup.jsonl"))
    assert "'backup.jsonl'" in line and "-o FILE" in line


def test_a_trace_directory_that_is_a_file_is_one_line(hermes_home: Path, store: Path,
                                                      tmp_path: Path) -> None:
    taken = tmp_path / "taken"
    taken.write_text("")
    line = one_line_failure(hermes(hermes_home, "sessions", "export", "--format", "trace",
                                   "--older-than", "30", "-o", str(taken)))
    assert f"{taken} is a file" in line and "name a directory with -o" in line
    line = one_line_failure(hermes(hermes_home, "sessions", "export", "--format", "html",
                                   "-o", str(tmp_path / "missing" / "x.html")))
    assert "x.html" in line and "directory must exist" in line
