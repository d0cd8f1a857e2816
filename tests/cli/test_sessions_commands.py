"""``hermes sessions list | show | search | export | recover`` and ``--help`` everywhere, run
in this process (stdout is not a terminal: tables are tab-separated)."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from hermes.cli import main
from hermes.recovery import spool
from hermes.state import SessionDB

TOOL_CALL = {"id": "c1", "type": "function",
             "function": {"name": "terminal", "arguments": '{"command": "ls"}'}}


@pytest.fixture
def db_path(hermes_home: Path) -> Path:
    path = hermes_home / "state.db"
    db = SessionDB(path)
    db.create_session("s-api", "api_server", chat_id="conv-1",
                      session_key="agent:main:api_server:dm:conv-1", model="fake-model")
    db.append_messages("s-api", [
        {"role": "user", "content": "find the answer"},
        {"role": "session_meta", "content": None},
        {"role": "assistant", "content": None, "tool_calls": [TOOL_CALL]},
        {"role": "tool", "tool_call_id": "c1", "tool_name": "terminal",
         "content": "exit code 0\nfile.txt"},
        {"role": "assistant", "content": "It is [bold]file.txt[/bold]"},
    ])
    db.create_session("s-local", "local", chat_id="default")
    db.append_message("s-local", "user", "hello there")
    db.append_message("s-local", "assistant", "hi")
    db.close()
    return path


def run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


def rows(out: str) -> list[dict[str, str]]:
    """A piped table: a header line, then one tab-separated line a row."""
    header, *lines = out.splitlines()
    names = header.split("\t")
    parsed = [dict(zip(names, line.split("\t"))) for line in lines]
    assert all(len(row) == len(names) for row in parsed), out
    return parsed


def test_list_shows_sessions_newest_first(db_path: Path,
                                          capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run(capsys, "sessions", "list")
    assert code == 0
    listed = rows(out)
    assert [row["id"] for row in listed] == ["s-local", "s-api"]
    assert listed[1]["chat"] == "conv-1" and listed[1]["source"] == "api_server"
    assert listed[1]["messages"] == "5"

    code, out, _ = run(capsys, "sessions", "list", "--source", "local")
    assert [row["id"] for row in rows(out)] == ["s-local"]
    code, out, _ = run(capsys, "sessions", "list", "--limit", "1")
    assert [row["id"] for row in rows(out)] == ["s-local"]


def test_list_json_is_every_column_of_every_session(
        db_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run(capsys, "sessions", "list", "--json")
    assert code == 0
    listed = json.loads(out)
    with SessionDB(db_path) as db:
        assert listed == json.loads(json.dumps(db.list_sessions_rich(compact_rows=True),
                                               default=str))
    assert [s["id"] for s in listed] == ["s-local", "s-api"]
    assert listed[1]["session_key"] == "agent:main:api_server:dm:conv-1"


def test_show_json_is_the_session_and_its_messages(
        db_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run(capsys, "sessions", "show", "conv-1", "--json")
    assert code == 0
    shown = json.loads(out)
    with SessionDB(db_path) as db:
        assert shown["session"] == json.loads(json.dumps(db.get_session("s-api"), default=str))
        assert shown["messages"] == json.loads(json.dumps(
            db.get_messages_as_conversation("s-api"), default=str))
    assert shown["messages"][2]["tool_calls"] == [TOOL_CALL]


def test_search_json_is_the_hits(db_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run(capsys, "sessions", "search", "answer OR hello", "--json")
    assert code == 0
    hits = json.loads(out)
    assert sorted(hit["session_id"] for hit in hits) == ["s-api", "s-local"]
    assert all(">>>" in hit["snippet"] for hit in hits)


def test_show_and_export_find_a_session_by_title(
        db_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    with SessionDB(db_path) as db:
        db.update_session("s-local", title="Greetings")
    code, out, _ = run(capsys, "sessions", "show", "Greetings")
    assert code == 0
    assert out.splitlines()[0] == "session s-local"
    assert "title: Greetings" in out
    code, out, _ = run(capsys, "sessions", "export", "Greetings")
    assert [json.loads(line)["content"] for line in out.splitlines()] == ["hello there", "hi"]


@pytest.mark.parametrize("ident", ["s-api", "conv-1", "agent:main:api_server:dm:conv-1"])
def test_show_prints_the_whole_transcript(db_path: Path, capsys: pytest.CaptureFixture[str],
                                          ident: str) -> None:
    code, out, _ = run(capsys, "sessions", "show", ident)
    assert code == 0
    lines = [line.strip() for line in out.splitlines() if line.strip()]
    assert lines[0] == "session s-api"
    assert "source: api_server" in lines
    expected = ["user:", "find the answer", "assistant:", '→ terminal({"command": "ls"})',
                "tool terminal:", "exit code 0", "file.txt", "assistant:",
                "It is [bold]file.txt[/bold]"]  # printed as written, not as markup
    remaining = iter(lines)
    assert all(line in remaining for line in expected), lines  # all of them, in this order
    assert any(line.startswith("[session_meta]") for line in lines)


def test_show_of_an_unknown_session_says_what_to_do(db_path: Path,
                                                    capsys: pytest.CaptureFixture[str]) -> None:
    code, _, err = run(capsys, "sessions", "show", "nope")
    assert code == 1
    assert err.startswith("hermes: no session, title or conversation 'nope'")
    assert "hermes sessions list" in err
    assert err.count("\n") == 1


def test_search_finds_and_marks_matches(db_path: Path,
                                        capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run(capsys, "sessions", "search", "answer")
    assert code == 0
    (hit,) = rows(out)
    assert hit["session"] == "s-api" and hit["match"] == "find the answer"  # no >>> marks

    code, out, _ = run(capsys, "sessions", "search", "hello", "--source", "api_server")
    assert rows(out) == []


@pytest.mark.parametrize("query", ['"answer', "answer AND", "(answer)", "answer:"])
def test_a_search_with_stray_syntax_still_runs(
    db_path: Path, capsys: pytest.CaptureFixture[str], query: str
) -> None:
    code, out, err = run(capsys, "sessions", "search", query)
    assert (code, err) == (0, "")
    (hit,) = rows(out)
    assert hit["session"] == "s-api"


def test_export_jsonl_is_the_conversation_one_message_a_line(
    db_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    code, out, _ = run(capsys, "sessions", "export", "conv-1", "--format", "jsonl")
    assert code == 0
    exported = [json.loads(line) for line in out.splitlines()]
    db = SessionDB(db_path)
    assert exported == json.loads(json.dumps(db.get_messages_as_conversation("s-api")))
    db.close()
    assert exported[2]["tool_calls"] == [TOOL_CALL]


def test_export_markdown_to_a_file(db_path: Path, tmp_path: Path,
                                   capsys: pytest.CaptureFixture[str]) -> None:
    target = tmp_path / "out.md"
    code, _, err = run(capsys, "sessions", "export", "s-api", "--format", "md", "-o",
                       str(target))
    assert code == 0
    assert f"wrote 5 messages to {target}" in err
    assert target.stat().st_mode & 0o777 == 0o600  # as private as state.db
    text = target.read_text()
    assert text.startswith("# Session s-api\n")
    assert "- **source**: api_server" in text
    for expected in ("## user\n\nfind the answer", "**calls `terminal`**",
                     '```json\n{"command": "ls"}\n```', "## tool `terminal`",
                     "exit code 0\nfile.txt", "<!-- session_meta"):
        assert expected in text


def test_a_long_export_writes_every_message(hermes_home: Path, tmp_path: Path,
                                            capsys: pytest.CaptureFixture[str]) -> None:
    db = SessionDB(hermes_home / "state.db")
    db.create_session("big", "local")
    db.append_messages("big", [{"role": "user", "content": f"message {i}"}
                               for i in range(500)])
    db.close()
    target = tmp_path / "big.jsonl"
    code, _, _ = run(capsys, "sessions", "export", "big", "-o", str(target))
    assert code == 0
    lines = target.read_text().splitlines()
    assert len(lines) == 500
    assert json.loads(lines[-1])["content"] == "message 499"


def test_recover_imports_spooled_messages_once(db_path: Path, hermes_home: Path,
                                               capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run(capsys, "sessions", "recover")
    assert (code, out.strip()) == (0, "nothing to recover: no spooled messages")

    spool("s-local", "local", [{"role": "user", "content": "written while the disk was full"},
                               {"role": "assistant", "content": "and kept"}])
    code, out, _ = run(capsys, "sessions", "recover")
    assert code == 0
    assert "2 messages recovered, 0 files failed" in out

    code, out, _ = run(capsys, "sessions", "recover")
    assert "nothing to recover" in out
    db = SessionDB(db_path)
    assert [m["content"] for m in db.get_messages_as_conversation("s-local")][-2:] == [
        "written while the disk was full", "and kept"]
    db.close()


def test_without_a_database_the_commands_say_so(capsys: pytest.CaptureFixture[str],
                                                hermes_home: Path) -> None:
    code, _, err = run(capsys, "sessions", "show", "s1")
    assert code == 1
    assert f"no session database at {hermes_home / 'state.db'}" in err
    assert not (hermes_home / "state.db").exists()


def test_a_new_home_lists_no_sessions_and_creates_no_file(capsys: pytest.CaptureFixture[str],
                                                         hermes_home: Path) -> None:
    code, out, err = run(capsys, "sessions", "list", "--json")
    assert (code, out.strip(), err) == (0, "[]", "")
    code, out, err = run(capsys, "sessions", "list")
    assert (code, err) == (0, "")
    assert not (hermes_home / "state.db").exists()


@pytest.mark.parametrize("argv", [
    [], ["gateway"], ["gateway", "run"], ["chat"], ["sessions"], ["sessions", "list"],
    ["sessions", "show"], ["sessions", "search"], ["sessions", "export"],
    ["sessions", "recover"],
])
def test_help_everywhere(argv: list[str], capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exited:
        main([*argv, "--help"])
    assert exited.value.code == 0
    assert capsys.readouterr().out.startswith("usage: hermes")


@pytest.mark.parametrize("argv", [[], ["gateway"], ["sessions"]])
def test_a_command_group_alone_shows_its_help(argv: list[str],
                                              capsys: pytest.CaptureFixture[str]) -> None:
    assert main(argv) == 2
    assert "commands:" in capsys.readouterr().out


@pytest.mark.parametrize("command", [["gateway", "run"], ["chat"]])
def test_an_endpoint_without_a_model_name_is_refused_before_starting(
    command: list[str], capsys: pytest.CaptureFixture[str], hermes_home: Path
) -> None:
    code, _, err = run(capsys, *command, "--base-url", "http://127.0.0.1:9/v1")
    assert code == 1
    assert "no model name" in err and "--model" in err
    assert not (hermes_home / "state.db").exists()
    assert os.environ["HERMES_BASE_URL"] == "http://127.0.0.1:9/v1"  # undone after the test
