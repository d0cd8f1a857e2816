"""Security (issue 7, item 6): file modes, binding, keys, allowlists, paths, SQL, secrets.

* state.db, its -wal and -shm, the spool directory and spool files are owner-only, even when
  the process runs with a permissive umask;
* the api_server refuses to serve a non-loopback address without a key, checks the key on
  every route but /health, and compares it with ``hmac.compare_digest``; conversations are
  continued only by the caller that owns them (``tests/api_server/test_openai_contract.py``);
* platform users are checked against ``allowed_users`` when one is configured, before
  anything is stored;
* no session id can make a spool path leave ``$HERMES_HOME/sessions``;
* SQL takes values only as parameters; the few statements built with ``format!`` in rust/src
  interpolate only reviewed identifiers;
* API keys (the model endpoint's and the gateway's own) never reach state.db, its WAL, the
  logs or the exports.
"""

from __future__ import annotations

import ast
import json
import os
import re
import stat
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import aiohttp
import pytest
import yaml
from hermes.config import ApiServerConfig
from hermes.errors import ConfigError
from hermes.gateway.platforms import api_auth
from hermes.gateway.platforms.api_auth import SESSION_HEADER, check_bind_allowed
from hermes.recovery import import_spool, recover_all, spool, spool_path
from hermes.state import SessionDB
from hypothesis import given, settings
from hypothesis import strategies as st
from support import postgres

from .fake_model import FakeModel
from .harness import REPO, ApiGateway, entry_for, hermes_cli, launch, post

OWNER_ONLY = 0o600


def mode(path: Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


@pytest.fixture
def permissive_umask() -> Iterator[None]:
    old = os.umask(0)
    try:
        yield
    finally:
        os.umask(old)


# -- file modes ----------------------------------------------------------------------------


@pytest.mark.asyncio
async def test_a_gateway_under_umask_0_keeps_its_files_owner_only(
        tmp_path: Path, permissive_umask: None) -> None:
    home, db_path = tmp_path / "home", tmp_path / "state.db"
    gateway = launch(home, db_path)  # inherits umask 0
    try:
        async with aiohttp.ClientSession() as http:
            assert (await post(http, gateway, "m", "turn m1 rounds=1"))[0] == 200
            files = [db_path, *(db_path.with_name(db_path.name + s) for s in ("-wal", "-shm"))]
            assert all(p.exists() for p in files)
            assert {p.name: oct(mode(p)) for p in files} == {p.name: oct(OWNER_ONLY)
                                                               for p in files}
        assert gateway.stop() == 0
    finally:
        gateway.kill()
    assert mode(db_path) == OWNER_ONLY


def test_spool_files_and_their_directory_are_owner_only(
        tmp_path: Path, permissive_umask: None) -> None:
    path = spool("s/1", "cli", [{"role": "user", "content": "secret"}], tmp_path / "sessions")
    assert mode(path) == OWNER_ONLY
    assert mode(path.parent) == 0o700
    spool("s/1", "cli", [{"role": "user", "content": "more"}], tmp_path / "sessions")
    assert mode(path) == OWNER_ONLY


def test_a_deleted_database_is_not_recreated_world_readable(tmp_path: Path) -> None:
    db_path = tmp_path / "state.db"
    db = SessionDB(db_path)
    db.create_session("s", "cli")
    db.append_message("s", "user", "private")
    for suffix in ("", "-wal", "-shm"):
        os.unlink(f"{db_path}{suffix}")
    try:
        db.get_session("s")
    except Exception:
        pass
    finally:
        db.close()
    if db_path.exists():
        with SessionDB(db_path) as reopened:
            reopened.create_session("t", "cli")
            reopened.append_message("t", "user", "private too")
        assert mode(db_path) == OWNER_ONLY, oct(mode(db_path))


# -- binding and keys -----------------------------------------------------------------------


@pytest.mark.parametrize("host", ["0.0.0.0", "::", "", "192.0.2.10", "10.0.0.1",
                                  "localhost.example.com", "127.0.0.1.nip.io", "example.com"])
def test_non_loopback_hosts_need_a_key(host: str) -> None:
    with pytest.raises(ConfigError, match="without a key"):
        check_bind_allowed(ApiServerConfig(host=host))
    check_bind_allowed(ApiServerConfig(host=host, key="k"))


@pytest.mark.parametrize("host", ["127.0.0.1", "localhost", "::1", "127.8.9.10"])
def test_loopback_hosts_need_no_key(host: str) -> None:
    check_bind_allowed(ApiServerConfig(host=host))


def test_the_cli_refuses_a_keyless_public_bind_before_listening(tmp_path: Path) -> None:
    done = hermes_cli(tmp_path / "home", "gateway", "run", "--host", "0.0.0.0", "--port", "1")
    assert done.returncode == 1, done
    assert "refusing to serve the api_server on 0.0.0.0:1 without a key" in done.stderr


def test_keys_are_compared_in_constant_time() -> None:
    """The bearer token is checked with hmac.compare_digest, and no ``==``/``!=``/``in``
    touches the key anywhere in the api_server's auth module."""
    tree = ast.parse(Path(api_auth.__file__).read_text())
    auth = next(n for n in ast.walk(tree)
                if isinstance(n, ast.AsyncFunctionDef) and n.name == "_authenticate")
    calls = [ast.unparse(n.func) for n in ast.walk(auth) if isinstance(n, ast.Call)]
    assert "hmac.compare_digest" in calls, calls
    for node in ast.walk(tree):
        if isinstance(node, ast.Compare):
            text = ast.unparse(node)
            if re.search(r"\bkey\b|token", text) and any(
                    isinstance(op, (ast.Eq, ast.NotEq, ast.In, ast.NotIn)) for op in node.ops):
                raise AssertionError(f"a key compared without compare_digest: {text}")


def test_a_key_and_an_allowlist_on_a_public_bind(tmp_path: Path) -> None:
    home = tmp_path / "home"
    home.mkdir()
    key = "gw-" + uuid.uuid4().hex
    (home / "config.yaml").write_text(yaml.safe_dump({"gateway": {"platforms": {
        "api_server": {"enabled": True, "allowed_users": ["alice"]}}}}))
    body = json.dumps({"messages": [{"role": "user", "content": "hi"}]}).encode()
    with ApiGateway(home, "--host", "0.0.0.0", API_SERVER_KEY=key) as gateway:
        def ask(authorization: str | None, user: str | None = None) -> tuple[int, dict]:
            headers = {"Content-Type": "application/json"}
            if authorization is not None:
                headers["Authorization"] = authorization
            sent = json.loads(body)
            if user is not None:
                sent["user"] = user
            status, _, reply = gateway.request("POST", "/v1/chat/completions",
                                               json.dumps(sent).encode(), headers)
            return status, json.loads(reply)

        assert gateway.request("GET", "/health")[0] == 200
        assert gateway.request("GET", "/v1/models")[0] == 401
        for wrong in (None, "", "Bearer", f"Bearer {key[:-1]}", f"Bearer {key}x",
                      f"Basic {key}", f"Bearer {key.upper()}", "Bearer \u00e9t\u00e9"):
            status, reply = ask(wrong, "alice")
            assert status == 401, (wrong, reply)
            assert reply["error"]["type"] == "authentication_error"
            assert key not in json.dumps(reply)
        assert ask(f"Bearer {key}", "alice")[0] == 200
        assert ask(f"bearer  {key} ", "alice")[0] == 200
        # The allowlist: a user not on it gets a 403 and nothing is stored for them.
        status, reply = ask(f"Bearer {key}", "mallory")
        assert status == 403 and reply["error"]["type"] == "permission_error", reply
    with SessionDB(home / "state.db") as db:
        users = {s["user_id"] for s in db.list_sessions()}
    assert users == {"alice"}, users


@pytest.mark.asyncio
async def test_platform_users_outside_the_allowlist_are_ignored(tmp_path: Path) -> None:
    home, db_path = tmp_path / "home", tmp_path / "state.db"
    platforms = {"webhook": {
        "enabled": True, "adapter": "support.loopback_adapter:LoopbackAdapter",
        "allowed_users": ["alice"],
        "extra": {"port_file": str(home / "port"), "outbox": str(home / "outbox.jsonl")}}}
    gateway = launch(home, db_path, platforms=platforms)
    try:
        async with aiohttp.ClientSession() as http:
            assert await post(http, gateway, "alice", "turn a1 rounds=1") == (
                200, "done a1 | seen: turn a1 rounds=1")
            assert await post(http, gateway, "mallory", "turn x1 rounds=1") == (200, None)
            assert await post(http, gateway, "mallory", "/new") == (200, None)  # commands too
        assert gateway.stop() == 0
    finally:
        gateway.kill()
    assert "ignoring a message from unauthorized user mallory" in gateway.log()
    with SessionDB(db_path) as db:
        assert entry_for(db, "mallory") is None
        assert {s["user_id"] for s in db.list_sessions()} == {"alice"}
        assert db.search_messages("x1") == []


# -- paths ------------------------------------------------------------------------------------


# Not "": the agent never spools for an empty id (it refuses to flush without one), and
# spool_path("") is "%00empty", the same file as the id "\x00empty".
NASTY_IDS = ["../../etc/passwd", "/abs/path", "a/b", "..", ".", ".hidden", "a\x00b",
             "C:\\windows", "%2e%2e%2f", "~root", "sess\nion", "a" * 200]


@settings(max_examples=300, deadline=None)
@given(session_id=st.text(max_size=300) | st.sampled_from(NASTY_IDS))
def test_no_session_id_leaves_the_spool_directory(tmp_path_factory: pytest.TempPathFactory,
                                                  session_id: str) -> None:
    directory = Path("/hermes-home/sessions")
    path = spool_path(session_id, directory)
    assert path.parent == directory
    assert "/" not in path.name and "\x00" not in path.name
    assert not path.name.startswith(".")
    assert path.name.endswith(".recovery.jsonl")
    other = spool_path(session_id + "x", directory)
    assert other != path  # one file per session


def test_nasty_ids_spool_inside_home_and_come_back_to_their_session(tmp_path: Path) -> None:
    directory = tmp_path / "home" / "sessions"
    with SessionDB(tmp_path / "state.db") as db:
        for n, session_id in enumerate(NASTY_IDS):
            path = spool(session_id, "cli", [{"role": "user", "content": f"m{n}"}], directory)
            assert path.resolve().parent == directory.resolve()
        assert sorted(p.name for p in tmp_path.rglob("*") if p.is_file()
                      and p.parent != directory and p.name.startswith("state.db")) == [
            p.name for p in sorted(tmp_path.glob("state.db*"))]
        report = recover_all(db, directory)
        assert report.failed == {}, report.failed
        for n, session_id in enumerate(NASTY_IDS):
            assert [m["content"] for m in db.get_messages(session_id)] == [f"m{n}"], session_id
    assert list(directory.iterdir()) == []


@pytest.mark.parametrize("session_id", ["a" * 300, ":" * 100, "日本語" * 10])
def test_a_long_session_id_can_be_spooled(tmp_path: Path, session_id: str) -> None:
    directory = tmp_path / "sessions"
    path = spool(session_id, "cli", [{"role": "user", "content": "kept"}], directory)
    with SessionDB(tmp_path / "state.db") as db:
        assert import_spool(db, path) == 1
        assert [m["content"] for m in db.get_messages(session_id)] == ["kept"]


# -- SQL ---------------------------------------------------------------------------------------

#: Every ``format!`` in rust/src that builds SQL, reviewed: what it interpolates and why that
#: cannot carry input. A new one fails test_sql_is_built_only_from_reviewed_identifiers until
#: it is reviewed and listed here.
REVIEWED_SQL_FORMATS = {
    ("commit.rs", "BEGIN; SET LOCAL synchronous_commit TO {sync}; SET LOCAL lock_timeout TO "
                  "{lock_ms}; SELECT {TAKE}, pg_current_xact_id()::text"):
        "string literals 'on' or 'off' (the durability); a number of milliseconds (an "
        "integer); the constant TAKE (PostgreSQL)",
    ("commit.rs", "SELECT 1 FROM sessions WHERE id = ANY($1) ORDER BY id FOR UPDATE{wait}"):
        "string literals '' or ' NOWAIT' (PostgreSQL; the ids are a bound parameter)",
    ("read.rs", "SELECT {columns} FROM messages WHERE session_id = $1{active} ORDER BY id"):
        "the constants MESSAGE_COLUMNS or CONVERSATION_COLUMNS; string literals '' or "
        "' AND active = 1' (PostgreSQL)",
    ("schema.rs", "BEGIN; SELECT pg_advisory_xact_lock({MIGRATION_LOCK})"):
        "the integer constant MIGRATION_LOCK (PostgreSQL)",
    ("schema.rs", "ALTER TABLE {table} ADD COLUMN {column} {decl}"):
        "constants of LATE_COLUMNS",
    ("search_index.rs", "INSERT INTO {table}(rowid, content) SELECT id, {text} FROM messages "
                        "WHERE id BETWEEN ?1 AND ?2"):
        "a table name from the constant KNOWN_INDEXES; its row text (row_text: the constant INDEXED_TEXT, "
        "or the constant FUNCTION applied to it)",
    ("search_index.rs", "INSERT INTO {table}(rowid, content) SELECT id, {text} FROM messages "
                        "WHERE id BETWEEN ?1 AND ?2 AND EXISTS (SELECT 1 FROM hermes_fts_pending p "
                        "WHERE messages.id BETWEEN p.first_id AND p.last_id) AND id NOT IN "
                        "(SELECT rowid FROM {table} WHERE rowid BETWEEN ?1 AND ?2)"):
        "a table name from the constant KNOWN_INDEXES; its row text (row_text: the constant INDEXED_TEXT, "
        "or the constant FUNCTION applied to it)",
    ("search_index.rs", "DELETE FROM {table} WHERE rowid IN (SELECT value FROM json_each(?1))"):
        "a table name from the constant KNOWN_INDEXES",
    ("search_index.rs", "INSERT INTO {table}(rowid, content) SELECT id, {text} FROM messages "
                        "WHERE id IN (SELECT value FROM json_each(?1))"):
        "a table name from the constant KNOWN_INDEXES; its row text (row_text: the constant INDEXED_TEXT, "
        "or the constant FUNCTION applied to it)",
    ("read.rs", "SELECT {columns} FROM messages WHERE session_id = ?1{active} ORDER BY id"):
        "a constant column list (MESSAGE_COLUMNS or CONVERSATION_COLUMNS); a constant clause",
    ("search_index.rs", "INSERT INTO {table}({table}) VALUES ('optimize')"):
        "a table name from the constant KNOWN_INDEXES",
    ("search_index.rs", "INSERT INTO {table}({table}) VALUES ('rebuild')"):
        "a table name from the constant KNOWN_INDEXES",
    ("search_index.rs", "DELETE FROM {table}"):
        "a table name from the constant KNOWN_INDEXES",
    ("search_index.rs", "INSERT INTO {table}(rowid, content) SELECT id, {INDEXED_TEXT} FROM messages"):
        "a table name from the constant KNOWN_INDEXES; the constant INDEXED_TEXT",
    ("schema.rs", "INSERT INTO messages_fts_trigram(rowid, content) SELECT id, {INDEXED_TEXT} "
                  "FROM messages"):
        "the constant INDEXED_TEXT",
    ("search.rs", "SELECT h.*, b.role AS before_role, b.content AS before_content, a.role AS "
                  "after_role, a.content AS after_content FROM (SELECT h.*, {before} AS before_id, "
                  "{after} AS after_id FROM ({inner}) h) h LEFT JOIN messages b ON b.id = "
                  "h.before_id LEFT JOIN messages a ON a.id = h.after_id ORDER BY {order}"):
        "the neighbour subqueries above; one of the two inner searches below; an order of "
        "string literals",
    ("search.rs", "SELECT {columns} FROM {table} JOIN messages m ON m.id = {table}.rowid JOIN "
                  "sessions s ON s.id = m.session_id WHERE {table} MATCH {query}{ranking}{filters} "
                  "ORDER BY {order} {page}"):
        "columns of string literals, a literal index table name and the constant HIT_COLUMNS; "
        "a literal index table name; the ranking constraint below; the filters and page of "
        "Statement (literal clauses and bound parameters); an order of string literals and the "
        "table name (the query itself is bound)",
    ("word_pairs.rs", "INSERT INTO hermes_fts_pairs (rowid, content) SELECT id, {text} "
                      "FROM messages WHERE id IN (SELECT id FROM hermes_fts_stale WHERE id BETWEEN "
                      "?1 AND ?2)"):
        "search_index::row_text: the constant FUNCTION applied to the constant INDEXED_TEXT",
    ("word_pairs.rs", "INSERT INTO hermes_fts_pairs (hermes_fts_pairs) VALUES ('delete-all'); "
                      "INSERT INTO hermes_fts_pairs (rowid, content) SELECT id, {text} "
                      "FROM messages; DELETE FROM hermes_fts_stale;"):
        "search_index::row_text: the constant FUNCTION applied to the constant INDEXED_TEXT",
    ("search.rs", "(SELECT n.id FROM messages n WHERE n.session_id = h.session_id AND "
                  "(n.timestamp, n.id) {cmp} (h.timestamp, h.id) ORDER BY n.timestamp {dir}, "
                  "n.id {dir} LIMIT 1)"):
        "string literals: '<' or '>', 'ASC' or 'DESC'",
    ("substrings.rs", "SELECT m.id, {snippet} AS snippet, {HIT_COLUMNS}, 0 AS hit_rank FROM "
                      "messages m JOIN sessions s ON s.id = m.session_id WHERE {found}{filters} "
                      "ORDER BY m.timestamp DESC, m.id DESC {page}"):
        "the substring snippet below; the constant HIT_COLUMNS; the term conditions below "
        "joined by AND / OR / AND NOT (or the literal 0); the filters and page of Statement",
    ("substrings.rs", "COALESCE(m.content LIKE {n} ESCAPE '\\\\' OR m.tool_name LIKE {n} ESCAPE "
                      "'\\\\' OR m.tool_calls LIKE {n} ESCAPE '\\\\', 0)"):
        "a parameter (Statement::bind's ?N; each term's pattern is bound)",
    ("search.rs", "SELECT count(*), max(rowid) - (SELECT min(id) FROM messages) FROM (SELECT "
                  "rowid FROM {table} WHERE {table} MATCH ?1 LIMIT {FEW_MATCHES})"):
        "a literal index table name; the integer constant FEW_MATCHES",
    ("search.rs", "(SELECT {end}(m.id) FROM messages m WHERE m.session_id = s.id AND "
                  "m.active = 1)"):
        "a literal 'min' or 'max'",
    ("search.rs", "SELECT s.id, {first}, {last}, COALESCE(s.message_count, 0) FROM sessions s "
                  "WHERE 1{sources}"):
        "the two subqueries above; the source filters of Statement (literal clauses and bound "
        "parameters)",
    ("search.rs", "SELECT m.id {from}{sources} AND m.active < 1{compacted} UNION ALL SELECT m.id "
                  "{from}{sources} AND m.active > 1{compacted} UNION ALL SELECT m.id FROM "
                  "messages m WHERE m.active IS NULL{compacted} AND m.session_id IN (SELECT s.id "
                  "FROM sessions s WHERE 1{sources})"):
        "a literal FROM clause; the source filters of Statement (literal clauses and bound "
        "parameters); a literal '' or ' AND m.compacted = 1'",
    ("search.rs", "SELECT m.id FROM json_each(?1) p CROSS JOIN messages m ON m.id = p.value "
                  "CROSS JOIN sessions s ON s.id = m.session_id WHERE 1{filters}"):
        "the filters of Statement (literal clauses and bound parameters; the ids are bound)",
    ("search.rs", "SELECT {table}.rowid, {table}.rank FROM {table} WHERE {table} MATCH ?1"
                  "{ranking} AND {function}({table}.rowid)"):
        "a literal index table name; the ranking constraint (IndexQuery::ranking: '' or ' AND "
        "<literal table>.rank MATCH ' and the constant RANK_MATCH); the constant name of the "
        "admitted-ids function",
    ("rank.rs", "SELECT rowid, rank FROM t WHERE t MATCH ?1{ranking} ORDER BY rank, rowid"):
        "a unit test's literal '' or ranking constraint (the constant RANK_MATCH)",
    ("search.rs", "SELECT m.id, {snippet} AS snippet, {HIT_COLUMNS}, p.key AS hit_rank FROM "
                  "json_each(?2) p JOIN messages m ON m.id = p.value JOIN sessions s ON s.id = "
                  "m.session_id"):
        "one of the two snippets of substrings.rs' Snippet; the constant HIT_COLUMNS (the "
        "query and the ids are bound)",
    ("substrings.rs", "(SELECT snippet({table}, 0, '>>>', '<<<', '...', 40) FROM {table} WHERE "
                      "{table} MATCH ?1 AND {table}.rowid = m.id)"):
        "a literal index table name (the query is bound)",
    ("substrings.rs", "substr({INDEXED_TEXT}, max(1, instr({INDEXED_TEXT}, ?1) - 40), 120)"):
        "the constant INDEXED_TEXT (the term is bound)",
    ("substrings.rs", "SELECT term FROM {VOCABULARY} WHERE term >= ?1 AND term <= ?2"):
        "the constant name of the temporary vocabulary table (the bounds are bound)",
    ("substrings.rs", "CREATE VIRTUAL TABLE IF NOT EXISTS {VOCABULARY} USING fts5vocab(main, "
                      "{TRIGRAMS}, row)"):
        "the constant names of the temporary vocabulary table and of the trigram index",
    ("substrings.rs", "SELECT m.id FROM {TABLE} CROSS JOIN messages m ON m.id = {TABLE}.rowid "
                      "CROSS JOIN sessions s ON s.id = m.session_id WHERE {TABLE} MATCH "
                      "?1{in_set}{filters} ORDER BY m.timestamp DESC, m.id DESC {page}"):
        "the constant trigram index name; '' or a test by the admitted-ids function's constant "
        "name of the literal table's rowid; the filters and page of Statement (the query is "
        "bound)",
    ("search.rs", "(SELECT value FROM json_each({}))"):
        "a parameter (Statement::bind's ?N: the listed values as one bound JSON text)",
    ("search.rs", " AND {table}.rowid >= (SELECT MIN(id) FROM messages WHERE session_id = {id}) "
                  "AND {table}.rowid <= (SELECT MAX(id) FROM messages WHERE session_id = {id})"):
        "a literal index table name; a parameter (the session id is bound)",
    ("search_index.rs", "INSERT INTO {table}({table}, rank) VALUES (?1, ?2)"):
        "a table name from the constant KNOWN_INDEXES",
    ("search_index.rs", "SELECT v FROM {table}_config WHERE k = ?1"):
        "a table name from the constant KNOWN_INDEXES",
    ("search_index.rs", "DELETE FROM {table}_config WHERE k = ?1"):
        "a table name from the constant KNOWN_INDEXES",
    ("search_index.rs", "SELECT k, v FROM {table}_config WHERE k != 'version' ORDER BY k"):
        "test code: a table name literal of the test",
    ("search_index.rs", "INSERT INTO {table}({table}) VALUES ('integrity-check')"):
        "test code: a table name literal of the test",
    ("search_index.rs", "SELECT COUNT(*) FROM {table}"):
        "test code: a table name literal of the test",
    ("search.rs", "WITH found AS MATERIALIZED ( SELECT x.message_id, x.session_id, {rank} AS "
                  "hit_rank FROM hermes_search x WHERE {matches}), hits AS MATERIALIZED ( SELECT "
                  "m.id, m.session_id, m.role, m.content, m.tool_name, m.tool_calls, m.timestamp, "
                  "s.source, s.model, s.started_at AS session_started, s.title, x.hit_rank FROM "
                  "found x JOIN messages m ON m.id = x.message_id JOIN sessions s ON s.id = "
                  "m.session_id WHERE {FILTERS} ORDER BY {inner} LIMIT $7 OFFSET $8) SELECT h.id, h.session_id, "
                  "h.role, h.content, h.tool_name, h.timestamp, h.source, h.model, "
                  "h.session_started, h.title, {snippet} AS snippet, b.id AS before_id, a.id AS "
                  "after_id, b.role AS before_role, b.content AS before_content, a.role AS "
                  "after_role, a.content AS after_content, h.hit_rank::float8 AS hit_rank FROM "
                  "hits h {before} b ON TRUE {after} a ON TRUE ORDER BY {outer}"):
        "PostgreSQL's search: a route's rank (a string literal), match (the literal "
        "'x.words @@ $1::tsquery' / 'x.grams @@ $1::tsquery' and conditions 'x.folded LIKE $n' "
        "joined by AND / OR / AND NOT) and snippet (the constant HIT_TEXT and a parameter "
        "number); the constant FILTERS; the neighbour joins below; orders of string "
        "literals. The query ($1, a tsquery literal whose lexemes are quoted) and every "
        "term's text are bound",
    ("search.rs", "LEFT JOIN LATERAL (SELECT n.id, n.role, n.content FROM messages n WHERE "
                  "n.session_id = h.session_id AND (n.timestamp {cmp} h.timestamp OR (n.timestamp "
                  "= h.timestamp AND n.id {cmp} h.id)) ORDER BY n.timestamp {dir}, n.id {dir} "
                  "LIMIT 1)"):
        "string literals: '<' or '>', 'ASC' or 'DESC'",
    ("search_index.rs", "BEGIN; SET LOCAL synchronous_commit TO off; SET LOCAL lock_timeout TO {}"):
        "a number of milliseconds (an integer)",
    ("search_index.rs", "SELECT id, first_id, last_id FROM hermes_search_pending WHERE first_id <= "
                        "$1 ORDER BY first_id LIMIT $2 FOR UPDATE {lock_clause}"):
        "the literal 'SKIP LOCKED' or nothing",
    ("tokenizer.rs", "CREATE VIRTUAL TABLE t USING fts5(content{options}); CREATE VIRTUAL TABLE "
                     "t_v USING fts5vocab(t, 'instance');"):
        "test code: the table's options, string literals of the tests ('' or the trigram "
        "tokenizer)",
}
#: The typed operations' SQL (store/sqlite/sql.rs) is written piece by piece, not with
#: format!: every name goes through Sql::ident (quoted, after the column check), every value
#: through Sql::bind (a ``?``). These are the only other expressions it writes, reviewed.
REVIEWED_SQL_PIECES = {
    "relation.name()": "a table name: a constant of the Relation enum",
    "columns": "Sql::returning's list, a constant in write.rs ('id, session_id')",
    "joint": "' AND ' or ' OR '",
    "text": "Sql::push itself",
    "if": "an if whose branches are string literals",
    "match": "a match whose arms are string literals",
    "key": "Sql::marker's JSON key, a &'static str: string literals at each call",
    "aggregate": "Sql::chain's aggregate, a &'static str: string literals at each call",
    "PYTHON_WHITESPACE": "a constant: the characters Python's str.strip() takes off, as char(...)",
}
_SQL_WORDS = re.compile(r"\b(SELECT|INSERT|UPDATE|DELETE|ALTER|CREATE|DROP|PRAGMA|SET|"
                        r"VALUES|WHERE|COALESCE)\b")


def sql_formats() -> set[tuple[str, str]]:
    found = set()
    for path in (REPO / "rust" / "src").rglob("*.rs"):
        text = path.read_text()
        for match in re.finditer(r'format!\(\s*"((?:[^"\\]|\\.)*)"', text):
            literal = re.sub(r"\s+", " ", match.group(1))
            if _SQL_WORDS.search(literal):
                found.add((path.name, literal))
    return found


def test_sql_is_built_only_from_reviewed_identifiers() -> None:
    found = sql_formats()
    unreviewed = found - set(REVIEWED_SQL_FORMATS)
    assert not unreviewed, f"SQL built with format! that nobody reviewed: {unreviewed}"
    # Values never go through format!: every {placeholder} above is an identifier list.
    for _, literal in found:
        assert "'{" not in literal and "\"{" not in literal, literal


def test_typed_sql_is_written_only_from_quoted_names_bound_values_and_constants() -> None:
    text = (REPO / "rust" / "src" / "store" / "sqlite" / "sql.rs").read_text()
    assert "format!(" not in text
    pieces = set(re.findall(r"\.push(?:_str)?\(\s*(?![\s\"'])([A-Za-z_][\w.]*(?:\(\))?)", text))
    assert pieces - {"value", "part"} <= set(REVIEWED_SQL_PIECES), pieces
    # `value` is a bound value pushed onto params, `part` a piece of a name being quoted.
    assert "self.params.push(value)" in text and "self.text.push_str(part)" in text


def test_hostile_names_and_values_are_refused_or_stored_verbatim(tmp_path: Path) -> None:
    hostile = "x'); DROP TABLE messages; --"
    with SessionDB(tmp_path / "state.db") as db:
        db.create_session(hostile, hostile, user_id=hostile, title=hostile)
        db.append_message(hostile, "user", hostile, tool_name=hostile,
                          platform_message_id=hostile)
        db.save_gateway_routing_entry(hostile, json.dumps({"k": hostile}), scope=hostile)
        db.set_meta(hostile, hostile)
        for name in (hostile, "title = 'x', source", "id", "message_count) VALUES (1); --"):
            with pytest.raises((ConfigError, ValueError)):
                db.update_session(hostile, **{name: "v"})
            with pytest.raises((ConfigError, ValueError)):
                db.create_session("other", "cli", **{name: "v"})
        assert db.get_session("other") is None
        session = db.get_session(hostile)
        assert session is not None and session["title"] == hostile
        assert session["source"] == hostile and session["message_count"] == 1
        [row] = db.get_messages(hostile)
        assert row["content"] == hostile and row["tool_name"] == hostile
        assert db.load_gateway_routing_entries(scope=hostile) == {hostile: json.dumps({"k": hostile})}
        assert db.get_meta(hostile) == hostile
        assert db.has_platform_message_id(hostile, hostile)
        assert [h["content"] for h in db.search_messages(hostile)] == [hostile]
        assert db.search_messages('"DROP TABLE messages"')[0]["content"] == hostile


def test_column_names_from_the_file_cannot_inject_sql(tmp_path: Path, write_sql: Any) -> None:
    db_path = tmp_path / "state.db"
    with SessionDB(db_path) as db:
        db.create_session("mine", "cli")
        db.create_session("victim", "cli")
    trap = "end_reason = 'pwned' WHERE 1 OR ?1 OR ?2 --"
    quoted = trap.replace('"', '""')
    if postgres.ENABLED:  # the same column added on the server, by psql
        postgres.psql(f'ALTER TABLE sessions ADD COLUMN "{quoted}" text',
                      url=postgres.store_url(db_path))
    else:  # by another program's SQLite
        write_sql(db_path, f'ALTER TABLE sessions ADD COLUMN "{quoted}" TEXT')
    with SessionDB(db_path) as db:
        try:
            db.update_session("mine", **{trap: "value"})
        except Exception:
            pass
        victim = db.get_session("victim")
    assert victim is not None and victim["end_reason"] is None


# -- secrets -------------------------------------------------------------------------------


def test_api_keys_never_reach_the_database_logs_or_exports(tmp_path: Path) -> None:
    model_key = "sk-canary-model-" + uuid.uuid4().hex
    gateway_key = "gw-canary-" + uuid.uuid4().hex
    secrets = [model_key.encode(), gateway_key.encode()]
    home = tmp_path / "home"
    home.mkdir()
    # No client retries, so the fake's every fourth answer (a 500) reaches the agent.
    (home / "config.yaml").write_text(yaml.safe_dump({"model": {"max_retries": 0}}))
    outputs: list[bytes] = []  # command outputs and the gateway's answers

    def leaks() -> list[str]:
        found = []
        for path in [*home.rglob("*"), *tmp_path.glob("export.*")]:
            if path.is_file():
                data = path.read_bytes()
                found += [f"{path}: {s.decode()[:12]}..." for s in secrets if s in data]
        found += [f"command output: {s.decode()[:12]}..." for out in outputs for s in secrets
                  if s in out]
        if postgres.ENABLED:  # the store is the server's, not a file in the home
            stored = postgres.store_text(postgres.store_url(home / "state.db")).encode()
            found += [f"the store: {s.decode()[:12]}..." for s in secrets if s in stored]
        return found

    with FakeModel(fail_every=4) as model, ApiGateway(
            home, "--base-url", model.url, "--model", "fake-model",
            OPENAI_API_KEY=model_key, API_SERVER_KEY=gateway_key) as gateway:
        auth = {"Content-Type": "application/json", "Authorization": f"Bearer {gateway_key}"}
        statuses = []
        for n in range(6):
            body = json.dumps({"messages": [{"role": "user", "content": f"question {n}"}],
                               "stream": n % 2 == 1}).encode()
            status, headers, answer = gateway.request("POST", "/v1/chat/completions", body,
                                                      auth)
            statuses.append(status)
            outputs.append(answer)
            # The first turn names the session; the others continue it from state.db.
            auth[SESSION_HEADER] = headers[SESSION_HEADER]
        session_id = auth[SESSION_HEADER]
        wrong = {**auth, "Authorization": f"Bearer {gateway_key[:-1]}"}
        statuses.append(gateway.request("POST", "/v1/chat/completions", b"{}", wrong)[0])
        # Every second turn's answer call is the model's scripted outage: a 502.
        assert statuses == [200, 502] * 3 + [401], statuses
        assert f"Bearer {model_key}" in model.auth_headers  # the key was really in use
        assert "scripted outage" in gateway.log()  # and a model failure was logged
        running = leaks()  # the WAL and -shm exist while it runs
    for args in (["list"], ["show", session_id], ["search", "question"],
                 ["export", session_id, "--format", "jsonl", "-o", str(tmp_path / "export.jsonl")],
                 ["export", session_id, "--format", "md", "-o", str(tmp_path / "export.md")],
                 ["export", session_id]):
        done = hermes_cli(home, "-v", "sessions", *args)
        assert done.returncode == 0, done
        outputs += [done.stdout.encode(), done.stderr.encode()]
    assert b"question 5" in (tmp_path / "export.jsonl").read_bytes()
    assert running == [] and leaks() == []
