//! The `Backend` contract, checked on every backend through the trait alone:
//! every typed operation, the dedicated hot paths, search, routing and meta,
//! the errors (missing session, bad column, closed store), counts that stay
//! the number of active rows, transcript order by id.
//!
//! A backend joins by one line in [`backends`]: a name and a function that
//! makes a fresh, empty store and returns how to open it (again, for a
//! second handle on the same data). A factory that cannot run here (no
//! server configured) returns None, and its backend is skipped, said on
//! stderr.

use std::ffi::OsString;

use _core::error::Error;
use _core::model::{NewMessage, Table, Value, ValueRef};
use _core::store::{
    self, Assign, Backend, Cmp, Delete, Derived, Filter, IndexUpkeep, Insert, Location, NoMatch,
    OnConflict, Options, Order, Page, Query, Relation, Search, SearchOrder, Term, Update, WriteOp,
    WriteOut,
};

/// Opens one fresh store; each call is another handle on the same data.
type Opener = Box<dyn Fn() -> Box<dyn Backend>>;

/// Makes a fresh, empty store (None: this backend cannot run here).
type Factory = fn(&tempfile::TempDir) -> Option<Opener>;

/// Every backend, by name. A PostgreSQL factory reads its server from
/// `HERMES_TEST_POSTGRES_URL` and returns None without it.
fn backends() -> Vec<(&'static str, Factory)> {
    vec![
        ("sqlite", sqlite),
        #[cfg(feature = "postgres")]
        ("postgresql", postgres::direct),
        #[cfg(feature = "postgres")]
        (
            "postgresql behind PgBouncer (transaction mode)",
            postgres::pgbouncer,
        ),
    ]
}

/// Fresh databases on the test server (`scripts/postgres` starts one).
#[cfg(feature = "postgres")]
mod postgres {
    use super::*;
    use std::sync::atomic::{AtomicUsize, Ordering};
    use std::time::{Duration, Instant};

    /// A new, empty database on the server of `HERMES_TEST_POSTGRES_URL`: its name.
    fn fresh_database() -> Option<(String, String)> {
        static NEXT: AtomicUsize = AtomicUsize::new(0);
        let base = std::env::var("HERMES_TEST_POSTGRES_URL").ok()?;
        let name = format!(
            "hermes_conformance_{}_{}",
            std::process::id(),
            NEXT.fetch_add(1, Ordering::Relaxed)
        );
        let (runtime, client) = client(&base);
        runtime
            .block_on(client.batch_execute(&format!("CREATE DATABASE {name}")))
            .expect("a test database is created");
        Some((base, name))
    }

    /// A fresh database's URL for a test of this module; None, said on
    /// stderr, when no server is configured.
    fn fresh_url() -> Option<OsString> {
        let Some((base, name)) = fresh_database() else {
            eprintln!("postgresql skipped (HERMES_TEST_POSTGRES_URL unset)");
            return None;
        };
        Some(with_database(&base, &name))
    }

    /// A plain client on `url`, on a runtime of its own.
    fn client(
        url: impl AsRef<std::ffi::OsStr>,
    ) -> (tokio::runtime::Runtime, tokio_postgres::Client) {
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        let url = url.as_ref().to_str().unwrap().to_owned();
        let client = runtime.block_on(async {
            let (client, connection) = tokio_postgres::connect(&url, tokio_postgres::NoTls)
                .await
                .expect("the test server answers");
            tokio::spawn(connection);
            client
        });
        (runtime, client)
    }

    /// `url` naming database `name` instead of its own.
    fn with_database(url: &str, name: &str) -> OsString {
        let (server, _) = url.rsplit_once('/').expect("a URL with a database");
        format!("{server}/{name}").into()
    }

    fn opener(url: OsString) -> Opener {
        Box::new(move || store::open(&url, Options::default()).expect("a fresh database opens"))
    }

    pub fn direct(_: &tempfile::TempDir) -> Option<Opener> {
        let (base, name) = fresh_database()?;
        Some(opener(with_database(&base, &name)))
    }

    pub fn pgbouncer(_: &tempfile::TempDir) -> Option<Opener> {
        let bouncer = std::env::var("HERMES_TEST_PGBOUNCER_URL").ok()?;
        let (_, name) = fresh_database()?;
        Some(opener(with_database(&bouncer, &name)))
    }

    #[test]
    fn hosts_starting_at_once_migrate_once() {
        let Some(url) = fresh_url() else {
            return;
        };
        let barrier = std::sync::Barrier::new(4);
        std::thread::scope(|scope| {
            for _ in 0..4 {
                scope.spawn(|| {
                    barrier.wait();
                    store::open(&url, Options::default()).expect("every host opens")
                });
            }
        });
        // schema_version is no relation of the typed operations: counted on a plain client.
        let (runtime, client) = client(&url);
        let rows: i64 = runtime
            .block_on(client.query_one("SELECT COUNT(*) FROM schema_version", &[]))
            .unwrap()
            .get(0);
        assert_eq!(rows, 1, "one migration, one version row");
    }

    #[test]
    fn rows_another_writer_inserted_are_found_by_the_next_search() {
        let Some(url) = fresh_url() else {
            return;
        };
        let db = opener(url.clone())();
        create(&*db, "s", "cli", 1.0);
        let (runtime, other) = client(&url);
        let count =
            |sql: &str| -> i64 { runtime.block_on(other.query_one(sql, &[])).unwrap().get(0) };
        // Another host, or a program of its own, writes plain SQL in one
        // transaction: the trigger marks its rows pending with it.
        runtime
            .block_on(other.batch_execute(
                "BEGIN;
                 INSERT INTO messages (session_id, role, content, timestamp, active)
                 VALUES ('s', 'user', 'the okapi grazes', 1, 1), ('s', 'user', '记忆断裂问题', 2, 1);
                 UPDATE sessions SET message_count = 2 WHERE id = 's';
                 COMMIT",
            ))
            .unwrap();
        assert_eq!(hits(&*db, "okapi").unwrap(), ["the okapi grazes"]);
        assert_eq!(hits(&*db, "记忆断裂").unwrap(), ["记忆断裂问题"]);
        assert_eq!(count("SELECT COUNT(*) FROM hermes_search_pending"), 0);
        assert_eq!(count("SELECT COUNT(*) FROM hermes_search"), 2);
        // An update of the text by that writer takes the old words out.
        runtime
            .block_on(other.batch_execute(
                "UPDATE messages SET content = 'the tapir grazes' WHERE content LIKE '%okapi%'",
            ))
            .unwrap();
        assert!(hits(&*db, "okapi").unwrap().is_empty());
        assert_eq!(hits(&*db, "tapir").unwrap(), ["the tapir grazes"]);
        runtime
            .block_on(other.batch_execute("DELETE FROM messages WHERE content LIKE '%tapir%'"))
            .unwrap();
        assert!(hits(&*db, "grazes").unwrap().is_empty());
        assert_eq!(count("SELECT COUNT(*) FROM hermes_search"), 1);
    }

    #[test]
    fn a_write_now_on_a_session_another_host_holds_fails_at_once_and_writes_nothing() {
        let Some(url) = fresh_url() else {
            return;
        };
        let budget = Duration::from_secs(30);
        let db = store::open(
            &url,
            Options {
                busy_budget: budget,
                ..Options::default()
            },
        )
        .unwrap();
        create(&*db, "s", "cli", 1.0);
        let op = || WriteOp::Append {
            session_id: "s".into(),
            rows: vec![message("user", "not now", 1.0)],
            once_key: None,
        };
        let (runtime, other) = client(&url);
        runtime
            .block_on(
                other.batch_execute("BEGIN; SELECT 1 FROM sessions WHERE id = 's' FOR UPDATE"),
            )
            .unwrap();
        let started = Instant::now();
        let err = db.write_now(op()).unwrap_err();
        assert!(matches!(err, Error::WriterBusy { .. }), "{err}");
        assert!(started.elapsed() < budget / 2, "it waited for the lock");
        runtime.block_on(other.batch_execute("ROLLBACK")).unwrap();
        assert_eq!(db.live_message_count("s").unwrap(), Some(0));
        assert!(matches!(db.write_now(op()).unwrap(), WriteOut::Ids(ids) if ids.len() == 1));
        assert_eq!(db.live_message_count("s").unwrap(), Some(1));
    }

    #[test]
    fn a_database_from_before_the_search_index_gets_its_messages_indexed() {
        let Some(url) = fresh_url() else {
            return;
        };
        let db = opener(url.clone())();
        create(&*db, "s", "cli", 1.0);
        append(&*db, "s", vec![message("user", "an older gnu", 1.0)]).unwrap();
        db.close();
        // What the first PostgreSQL release left: the v22 tables, no search index.
        let (runtime, other) = client(&url);
        runtime
            .block_on(other.batch_execute(
                "DROP TABLE hermes_search, hermes_search_pending;
                 DROP FUNCTION hermes_search_inserted, hermes_search_updated,
                     hermes_search_deleted, hermes_append CASCADE;
                 DROP TABLE hermes_migrations;",
            ))
            .unwrap();
        let db = opener(url)();
        assert_eq!(hits(&*db, "gnu").unwrap(), ["an older gnu"]);
        append(&*db, "s", vec![message("user", "a newer gnu", 2.0)]).unwrap();
        assert_eq!(hits(&*db, "gnu").unwrap().len(), 2);
    }

    #[test]
    fn nul_bytes_and_the_json_prefix_come_back_exactly() {
        let Some(url) = fresh_url() else {
            return;
        };
        let db = opener(url)();
        create(&*db, "s\0id", "cli", 0.1 + 0.2);
        let contents = ["\0json:[{\"type\":\"text\"}]", "a\0b\u{1}c\u{1}0", "plain"];
        let rows = contents
            .iter()
            .map(|c| message("user", c, 1.0 / 3.0))
            .collect();
        append(&*db, "s\0id", rows).unwrap();
        let table = db.messages("s\0id", false).unwrap();
        let expected: Vec<Value> = contents.iter().map(|c| text(c)).collect();
        assert_eq!(column(&table, "content"), expected);
        assert_eq!(column(&table, "timestamp")[0], Value::Real(1.0 / 3.0));
        assert_eq!(
            session_value(&*db, "s\0id", "started_at"),
            Value::Real(0.1 + 0.2)
        );
        let found = db
            .query(&sessions_query(Filter::eq("id", "s\0id")))
            .unwrap();
        assert_eq!(ids(&found), [text("s\0id")]);
    }
}

fn sqlite(dir: &tempfile::TempDir) -> Option<Opener> {
    let path: OsString = dir.path().join("state.db").into();
    Some(Box::new(move || {
        store::open(&path, Options::default()).expect("a fresh state.db opens")
    }))
}

/// Runs `test` on a fresh store of every backend.
fn on_every_backend(test: impl Fn(&dyn Fn() -> Box<dyn Backend>)) {
    on_backends(backends(), test)
}

fn on_backends(
    backends: Vec<(&'static str, Factory)>,
    test: impl Fn(&dyn Fn() -> Box<dyn Backend>),
) {
    for (name, factory) in backends {
        let dir = tempfile::tempdir().unwrap();
        let Some(open) = factory(&dir) else {
            eprintln!("conformance: {name} skipped (not configured here)");
            continue;
        };
        eprintln!("conformance: {name}");
        test(&*open);
    }
}

fn text(s: &str) -> Value {
    Value::from(s)
}

fn create(db: &dyn Backend, id: &str, source: &str, started_at: f64) {
    let op = WriteOp::Insert(Insert {
        relation: Relation::Sessions,
        values: vec![
            ("id".into(), text(id)),
            ("source".into(), text(source)),
            ("started_at".into(), Value::Real(started_at)),
        ],
        on_conflict: OnConflict::FillNulls,
    });
    assert_eq!(db.write(op).unwrap(), WriteOut::Rows(1));
}

fn message(role: &str, content: &str, timestamp: f64) -> NewMessage {
    NewMessage::text(role, content, timestamp)
}

fn append(db: &dyn Backend, session_id: &str, rows: Vec<NewMessage>) -> Result<Vec<i64>, Error> {
    let op = WriteOp::Append {
        session_id: session_id.into(),
        rows,
        once_key: None,
    };
    db.write(op).map(|out| match out {
        WriteOut::Ids(ids) => ids,
        other => panic!("an append returns ids, not {other:?}"),
    })
}

fn owned(cell: ValueRef<'_>) -> Value {
    match cell {
        ValueRef::Null => Value::Null,
        ValueRef::Integer(n) => Value::Integer(n),
        ValueRef::Real(x) => Value::Real(x),
        ValueRef::Text(t) => Value::Text(String::from_utf8(t.to_vec()).unwrap()),
        ValueRef::Blob(b) => Value::Blob(b.to_vec()),
    }
}

/// Column `name` of every row.
fn column(table: &Table, name: &str) -> Vec<Value> {
    let index = table
        .columns
        .iter()
        .position(|c| c == name)
        .unwrap_or_else(|| panic!("no column {name} in {:?}", table.columns));
    table.rows().map(|r| owned(r.get(index))).collect()
}

fn ids(table: &Table) -> Vec<Value> {
    column(table, "id")
}

fn session_value(db: &dyn Backend, id: &str, name: &str) -> Value {
    column(&db.session(id).unwrap(), name).remove(0)
}

fn set(relation: Relation, filter: Filter, set: Vec<(&str, Assign)>) -> WriteOp {
    WriteOp::Update(Update {
        relation,
        filter,
        set: set.into_iter().map(|(c, a)| (c.to_owned(), a)).collect(),
        must_match: None,
    })
}

fn sessions_query(filter: Filter) -> Query {
    Query {
        filter,
        order: vec![Order {
            term: Term::Column("id".into()),
            descending: false,
        }],
        ..Query::all(Relation::Sessions)
    }
}

#[test]
fn a_session_is_created_once_and_merges_later_columns() {
    on_every_backend(|open| {
        let db = open();
        create(&*db, "s", "cli", 1.0);
        let again = WriteOp::Insert(Insert {
            relation: Relation::Sessions,
            values: vec![
                ("id".into(), text("s")),
                ("source".into(), text("telegram")),
                ("started_at".into(), Value::Real(9.0)),
                ("title".into(), text("Trip")),
            ],
            on_conflict: OnConflict::FillNulls,
        });
        db.write(again).unwrap();
        assert_eq!(session_value(&*db, "s", "source"), text("cli"));
        assert_eq!(session_value(&*db, "s", "started_at"), Value::Real(1.0));
        assert_eq!(session_value(&*db, "s", "title"), text("Trip"));
        assert_eq!(session_value(&*db, "s", "message_count"), Value::Integer(0));
        assert_eq!(db.session("none").unwrap().row_count(), 0);
        assert_eq!(db.live_message_count("none").unwrap(), None);
    });
}

#[test]
fn appended_messages_come_back_in_id_order_and_the_count_is_the_active_rows() {
    on_every_backend(|open| {
        let db = open();
        create(&*db, "s", "cli", 1.0);
        // Timestamps out of order: the order is the id's.
        let first = append(&*db, "s", vec![message("user", "one", 5.0)]).unwrap();
        let more = append(
            &*db,
            "s",
            vec![
                message("assistant", "two", 3.0),
                message("user", "three", 4.0),
            ],
        )
        .unwrap();
        assert_eq!(more.len(), 2);
        assert!(
            first[0] < more[0] && more[0] < more[1],
            "{first:?} {more:?}"
        );
        assert_eq!(db.live_message_count("s").unwrap(), Some(3));
        assert_eq!(db.own_appends("s"), 3);
        assert_eq!(
            column(&db.messages("s", false).unwrap(), "content"),
            [text("one"), text("two"), text("three")]
        );
        let mut contents = Vec::new();
        db.conversation("s", false, &mut |table| {
            contents.extend(column(&table, "content"));
            true
        })
        .unwrap();
        assert_eq!(contents, [text("one"), text("two"), text("three")]);
        // A long transcript arrives whole and in order, however it is split.
        let many: Vec<NewMessage> = (0..500)
            .map(|i| message("user", &format!("n{i}"), 1.0))
            .collect();
        append(&*db, "s", many).unwrap();
        let mut seen = 0;
        db.conversation("s", false, &mut |table| {
            seen += table.row_count();
            true
        })
        .unwrap();
        assert_eq!(seen, 503);
        assert_eq!(db.live_message_count("s").unwrap(), Some(503));
    });
}

#[test]
fn an_append_to_a_missing_session_fails_and_writes_nothing() {
    on_every_backend(|open| {
        let db = open();
        let err = append(&*db, "missing", vec![message("user", "x", 1.0)]).unwrap_err();
        assert!(
            matches!(err, Error::SessionNotFound { ref session_id, .. } if session_id == "missing")
        );
        assert_eq!(db.count(Relation::Messages, &Filter::All).unwrap(), 0);
        assert_eq!(db.own_appends("missing"), 0);
    });
}

#[test]
fn appends_of_many_conversations_at_once_each_land_whole_and_a_missing_one_alone_fails() {
    on_every_backend(|open| {
        let db = open();
        let conversations = 12;
        for c in 0..conversations {
            create(&*db, &format!("c{c}"), "cli", 1.0);
        }
        // Threads racing into the group commit: their appends share batches
        // (on PostgreSQL one statement), with appends to a missing session
        // among them, and two threads on one conversation.
        let turns = 6;
        std::thread::scope(|scope| {
            for t in 0..=conversations {
                let db = &*db;
                scope.spawn(move || {
                    let session = match t {
                        t if t == conversations => "c0".to_owned(),
                        t => format!("c{t}"),
                    };
                    for turn in 0..turns {
                        let rows = (0..3)
                            .map(|i| message("user", &format!("{t}/{turn}/{i}"), 1.0))
                            .collect();
                        let ids = append(db, &session, rows).unwrap();
                        assert_eq!(ids.len(), 3);
                        assert!(ids.windows(2).all(|w| w[0] < w[1]), "{ids:?}");
                        let err = append(db, &format!("gone{t}"), vec![message("user", "x", 1.0)])
                            .unwrap_err();
                        assert!(matches!(err, Error::SessionNotFound { .. }), "{err:?}");
                    }
                });
            }
        });
        for c in 0..conversations {
            let session = format!("c{c}");
            let writers = if c == 0 { 2 } else { 1 };
            let want = (writers * turns * 3) as i64;
            assert_eq!(db.live_message_count(&session).unwrap(), Some(want));
            let contents = column(&db.messages(&session, false).unwrap(), "content");
            assert_eq!(contents.len() as i64, want);
            // Each writer's rows in the order it wrote them.
            let writer_of = |v: &Value| match v {
                Value::Text(t) => t.split('/').next().unwrap().to_owned(),
                other => panic!("{other:?}"),
            };
            let mut last: std::collections::HashMap<String, usize> = Default::default();
            for (at, v) in contents.iter().enumerate() {
                last.insert(writer_of(v), at);
            }
            for (writer, _) in last {
                let mine: Vec<&Value> =
                    contents.iter().filter(|v| writer_of(v) == writer).collect();
                let expected: Vec<Value> = (0..turns)
                    .flat_map(|turn| (0..3).map(move |i| (turn, i)))
                    .map(|(turn, i)| text(&format!("{writer}/{turn}/{i}")))
                    .collect();
                assert_eq!(mine, expected.iter().collect::<Vec<_>>());
            }
        }
        let total = (conversations + 1) * turns * 3;
        assert_eq!(
            db.count(Relation::Messages, &Filter::All).unwrap(),
            total as i64
        );
    });
}

#[test]
fn a_once_key_appends_once() {
    on_every_backend(|open| {
        let db = open();
        create(&*db, "s", "cli", 1.0);
        let op = || WriteOp::Append {
            session_id: "s".into(),
            rows: vec![message("user", "x", 1.0)],
            once_key: Some("spool:abc".into()),
        };
        assert!(matches!(db.write(op()).unwrap(), WriteOut::Ids(ids) if ids.len() == 1));
        assert_eq!(db.write(op()).unwrap(), WriteOut::Ids(vec![]));
        assert_eq!(db.live_message_count("s").unwrap(), Some(1));
    });
}

#[test]
fn a_write_now_commits_when_nothing_else_writes() {
    on_every_backend(|open| {
        let db = open();
        create(&*db, "s", "cli", 1.0);
        let op = WriteOp::Append {
            session_id: "s".into(),
            rows: vec![message("session_meta", "", 1.0)],
            once_key: None,
        };
        assert!(matches!(db.write_now(op).unwrap(), WriteOut::Ids(ids) if ids.len() == 1));
        assert_eq!(db.live_message_count("s").unwrap(), Some(1));
    });
}

#[test]
fn updates_set_add_and_require_and_check_their_columns() {
    on_every_backend(|open| {
        let db = open();
        create(&*db, "s", "cli", 1.0);
        let title = set(
            Relation::Sessions,
            Filter::eq("id", "s"),
            vec![
                ("title", Assign::Value(text("Plan"))),
                ("rewind_count", Assign::Add(Value::Integer(2))),
            ],
        );
        assert_eq!(db.write(title).unwrap(), WriteOut::Rows(1));
        assert_eq!(session_value(&*db, "s", "title"), text("Plan"));
        assert_eq!(session_value(&*db, "s", "rewind_count"), Value::Integer(2));
        let missing = WriteOp::Update(Update {
            relation: Relation::Sessions,
            filter: Filter::eq("id", "nope"),
            set: vec![("title".into(), Assign::Value(text("x")))],
            must_match: Some(NoMatch::Session("nope".into())),
        });
        assert!(matches!(
            db.write(missing),
            Err(Error::SessionNotFound { .. })
        ));
        for column in ["no_such_column", "message_count", "tool_call_count", "id"] {
            let bad = set(
                Relation::Sessions,
                Filter::eq("id", "s"),
                vec![(column, Assign::Value(Value::Integer(7)))],
            );
            assert!(matches!(db.write(bad), Err(Error::Config(_))), "{column}");
        }
        assert_eq!(session_value(&*db, "s", "message_count"), Value::Integer(0));
        let bad_filter = set(
            Relation::Sessions,
            Filter::eq("nope", 1),
            vec![("title", Assign::Value(text("x")))],
        );
        assert!(matches!(db.write(bad_filter), Err(Error::Config(_))));
    });
}

#[test]
fn updates_add_reals_and_fill_only_null_columns() {
    on_every_backend(|open| {
        let db = open();
        create(&*db, "s", "cli", 1.0);
        for _ in 0..2 {
            let usage = set(
                Relation::Sessions,
                Filter::eq("id", "s"),
                vec![
                    ("estimated_cost_usd", Assign::Add(Value::Real(0.25))),
                    ("model", Assign::FillNull(text("first"))),
                ],
            );
            db.write(usage).unwrap();
        }
        assert_eq!(
            session_value(&*db, "s", "estimated_cost_usd"),
            Value::Real(0.5)
        );
        let second = set(
            Relation::Sessions,
            Filter::eq("id", "s"),
            vec![("model", Assign::FillNull(text("second")))],
        );
        db.write(second).unwrap();
        assert_eq!(session_value(&*db, "s", "model"), text("first"));
    });
}

#[test]
fn compression_locks_and_model_usage_rows_are_keyed_by_their_tables_keys() {
    on_every_backend(|open| {
        let db = open();
        create(&*db, "s", "cli", 1.0);
        let lock = |holder: &str| {
            WriteOp::Insert(Insert {
                relation: Relation::CompressionLocks,
                values: vec![
                    ("session_id".into(), text("s")),
                    ("holder".into(), text(holder)),
                    ("acquired_at".into(), Value::Real(1.0)),
                    ("expires_at".into(), Value::Real(2.0)),
                ],
                on_conflict: OnConflict::Ignore,
            })
        };
        assert_eq!(db.write(lock("a")).unwrap(), WriteOut::Rows(1));
        assert_eq!(db.write(lock("b")).unwrap(), WriteOut::Rows(0));
        let usage = |model: &str| {
            WriteOp::Transaction(vec![
                WriteOp::Insert(Insert {
                    relation: Relation::SessionModelUsage,
                    values: vec![
                        ("session_id".into(), text("s")),
                        ("model".into(), text(model)),
                    ],
                    on_conflict: OnConflict::Ignore,
                }),
                set(
                    Relation::SessionModelUsage,
                    Filter::And(vec![
                        Filter::eq("session_id", "s"),
                        Filter::eq("model", model),
                    ]),
                    vec![("input_tokens", Assign::Add(Value::Integer(10)))],
                ),
            ])
        };
        for model in ["m1", "m1", "m2"] {
            db.write(usage(model)).unwrap();
        }
        let query = Query {
            select: vec![Term::Column("input_tokens".into())],
            filter: Filter::eq("session_id", "s"),
            order: vec![Order {
                term: Term::Column("model".into()),
                descending: false,
            }],
            ..Query::all(Relation::SessionModelUsage)
        };
        let table = db.query(&query).unwrap();
        assert_eq!(
            column(&table, "input_tokens"),
            [Value::Integer(20), Value::Integer(10)]
        );
        let holders = Query {
            select: vec![Term::Column("holder".into())],
            ..Query::all(Relation::CompressionLocks)
        };
        assert_eq!(column(&db.query(&holders).unwrap(), "holder"), [text("a")]);
    });
}

#[test]
fn rewinding_and_deleting_messages_keep_the_count_at_the_active_rows() {
    on_every_backend(|open| {
        let db = open();
        create(&*db, "s", "cli", 1.0);
        create(&*db, "t", "cli", 1.0);
        let rows = (0..5)
            .map(|i| message("user", &format!("m{i}"), 1.0))
            .collect();
        let ids = append(&*db, "s", rows).unwrap();
        append(&*db, "t", vec![message("user", "other", 1.0)]).unwrap();
        let from_third = Filter::And(vec![
            Filter::eq("session_id", "s"),
            Filter::Compare(Term::Column("id".into()), Cmp::Ge, Value::Integer(ids[2])),
        ]);
        let rewind = set(
            Relation::Messages,
            from_third.clone(),
            vec![("active", Assign::Value(Value::Integer(0)))],
        );
        assert_eq!(db.write(rewind).unwrap(), WriteOut::Rows(3));
        assert_eq!(db.live_message_count("s").unwrap(), Some(2));
        assert_eq!(db.messages("s", false).unwrap().row_count(), 2);
        assert_eq!(db.messages("s", true).unwrap().row_count(), 5);
        let restore = set(
            Relation::Messages,
            from_third,
            vec![("active", Assign::Value(Value::Integer(1)))],
        );
        db.write(restore).unwrap();
        assert_eq!(db.live_message_count("s").unwrap(), Some(5));
        let first_two = WriteOp::Delete(Delete {
            relation: Relation::Messages,
            filter: Filter::In(
                Term::Column("id".into()),
                vec![ids[0].into(), ids[1].into()],
            ),
        });
        assert_eq!(db.write(first_two).unwrap(), WriteOut::Rows(2));
        assert_eq!(db.live_message_count("s").unwrap(), Some(3));
        assert_eq!(
            db.live_message_count("t").unwrap(),
            Some(1),
            "another session untouched"
        );
        let session_id = set(
            Relation::Messages,
            Filter::All,
            vec![("session_id", Assign::Value(text("t")))],
        );
        assert!(matches!(db.write(session_id), Err(Error::Config(_))));
        let insert = WriteOp::Insert(Insert {
            relation: Relation::Messages,
            values: vec![("role".into(), text("user"))],
            on_conflict: OnConflict::Fail,
        });
        assert!(
            matches!(db.write(insert), Err(Error::Config(_))),
            "messages come by append"
        );
    });
}

#[test]
fn an_insert_fails_ignores_replaces_or_fills_a_row_with_its_key() {
    on_every_backend(|open| {
        let db = open();
        let meta = |value: &str, on_conflict| {
            db.write(WriteOp::Insert(Insert {
                relation: Relation::StateMeta,
                values: vec![("key".into(), text("k")), ("value".into(), text(value))],
                on_conflict,
            }))
        };
        let value = || {
            let query = Query {
                select: vec![Term::Column("value".into())],
                filter: Filter::eq("key", "k"),
                ..Query::all(Relation::StateMeta)
            };
            column(&db.query(&query).unwrap(), "value")
        };
        assert_eq!(meta("a", OnConflict::Fail).unwrap(), WriteOut::Rows(1));
        assert!(meta("b", OnConflict::Fail).is_err());
        assert_eq!(meta("c", OnConflict::Ignore).unwrap(), WriteOut::Rows(0));
        assert_eq!(meta("d", OnConflict::FillNulls).unwrap(), WriteOut::Rows(1));
        assert_eq!(value(), [text("a")], "only NULL columns are filled");
        meta("e", OnConflict::Replace).unwrap();
        assert_eq!(value(), [text("e")]);
        let twice = WriteOp::Insert(Insert {
            relation: Relation::StateMeta,
            values: vec![("key".into(), text("x")), ("key".into(), text("y"))],
            on_conflict: OnConflict::Fail,
        });
        assert!(matches!(db.write(twice), Err(Error::Config(_))));
    });
}

#[test]
fn queries_filter_order_page_and_derive() {
    on_every_backend(|open| {
        let db = open();
        create(&*db, "a", "cli", 1.0);
        create(&*db, "b", "cli", 2.0);
        create(&*db, "c", "telegram", 3.0);
        create(&*db, "d", "telegram", 4.0);
        db.write(set(
            Relation::Sessions,
            Filter::In(Term::Column("id".into()), vec![text("b"), text("d")]),
            vec![("title", Assign::Value(text("Docker notes")))],
        ))
        .unwrap_err(); // titles are unique
        db.write(set(
            Relation::Sessions,
            Filter::eq("id", "b"),
            vec![("title", Assign::Value(text("Docker notes")))],
        ))
        .unwrap();
        append(
            &*db,
            "c",
            vec![
                message("system", "setup", 10.0),
                message("user", "first\nline", 11.0),
                message("user", "second", 12.0),
            ],
        )
        .unwrap();
        let q = |filter| ids(&db.query(&sessions_query(filter)).unwrap());
        let col = |name: &str| Term::Column(name.into());
        assert_eq!(q(Filter::All), [text("a"), text("b"), text("c"), text("d")]);
        assert_eq!(q(Filter::eq("source", "cli")), [text("a"), text("b")]);
        assert_eq!(
            q(Filter::Compare(
                col("started_at"),
                Cmp::Gt,
                Value::Real(2.0)
            )),
            [text("c"), text("d")]
        );
        assert_eq!(
            q(Filter::Compare(col("source"), Cmp::Ne, text("cli"))),
            [text("c"), text("d")]
        );
        assert_eq!(
            q(Filter::Compare(
                col("started_at"),
                Cmp::Le,
                Value::Integer(2)
            )),
            [text("a"), text("b")]
        );
        assert_eq!(
            q(Filter::Compare(
                col("started_at"),
                Cmp::Lt,
                Value::Integer(2)
            )),
            [text("a")]
        );
        assert_eq!(
            q(Filter::Compare(
                col("started_at"),
                Cmp::Ge,
                Value::Integer(4)
            )),
            [text("d")]
        );
        assert_eq!(
            q(Filter::Not(Box::new(Filter::IsNull(col("title"))))),
            [text("b")]
        );
        assert_eq!(q(Filter::Like(col("title"), "docker%".into())), [text("b")]);
        assert_eq!(
            q(Filter::Glob(col("title"), "docker*".into())),
            Vec::<Value>::new()
        );
        assert_eq!(q(Filter::Glob(col("title"), "Docker*".into())), [text("b")]);
        assert_eq!(
            q(Filter::Or(vec![
                Filter::eq("id", "a"),
                Filter::eq("id", "d")
            ])),
            [text("a"), text("d")]
        );
        assert_eq!(q(Filter::In(col("id"), vec![])), Vec::<Value>::new());
        assert_eq!(q(Filter::And(vec![])), q(Filter::All));
        // Sessions with a user message: a query inside the filter.
        let with_user = Query {
            select: vec![col("session_id")],
            filter: Filter::eq("role", "user"),
            ..Query::all(Relation::Messages)
        };
        assert_eq!(
            q(Filter::InQuery(col("id"), Box::new(with_user))),
            [text("c")]
        );

        let page = Query {
            select: vec![
                col("id"),
                Term::Derived(Derived::Preview),
                Term::Derived(Derived::LastActive),
            ],
            order: vec![Order {
                term: Term::Derived(Derived::LastActive),
                descending: true,
            }],
            limit: Some(2),
            offset: 0,
            ..Query::all(Relation::Sessions)
        };
        let table = db.query(&page).unwrap();
        assert_eq!(&table.columns[..], ["id", "preview", "last_active"]);
        assert_eq!(ids(&table), [text("c"), text("d")]);
        assert_eq!(column(&table, "preview"), [text("first line"), text("")]);
        assert_eq!(
            column(&table, "last_active"),
            [Value::Real(12.0), Value::Real(4.0)]
        );
        let next = Query { offset: 2, ..page };
        assert_eq!(ids(&db.query(&next).unwrap()), [text("b"), text("a")]);

        assert_eq!(
            db.count(Relation::Sessions, &Filter::eq("source", "telegram"))
                .unwrap(),
            2
        );
        assert_eq!(
            db.count(Relation::Messages, &Filter::eq("session_id", "c"))
                .unwrap(),
            3
        );
        let bad = Query {
            select: vec![col("nope")],
            ..Query::all(Relation::Sessions)
        };
        assert!(matches!(db.query(&bad), Err(Error::Config(_))));
        let null = sessions_query(Filter::eq("title", Value::Null));
        assert!(matches!(db.query(&null), Err(Error::Config(_))));
    });
}

#[test]
fn lineage_and_upkeep_values_are_derived_per_session() {
    on_every_backend(|open| {
        let db = open();
        // root -> cont (a compression continuation) -> tip; a branch, a
        // delegate run and a plain child of root; a row with broken JSON.
        for (id, started) in [
            ("root", 1.0),
            ("cont", 2.0),
            ("tip", 3.0),
            ("branch", 4.0),
            ("delegate", 5.0),
            ("child", 6.0),
            ("broken", 7.0),
        ] {
            create(&*db, id, "cli", started);
        }
        let assign = |id: &str, values: Vec<(&str, Value)>| {
            db.write(set(
                Relation::Sessions,
                Filter::eq("id", id),
                values
                    .into_iter()
                    .map(|(c, v)| (c, Assign::Value(v)))
                    .collect(),
            ))
            .unwrap();
        };
        let compressed = || text("compression");
        assign(
            "root",
            vec![("end_reason", compressed()), ("title", text("AN-94 plan"))],
        );
        assign(
            "cont",
            vec![
                ("parent_session_id", text("root")),
                ("end_reason", compressed()),
            ],
        );
        assign(
            "tip",
            vec![("parent_session_id", text("cont")), ("title", text("Tip"))],
        );
        assign(
            "branch",
            vec![
                ("parent_session_id", text("root")),
                ("model_config", text(r#"{"_branched_from": "root"}"#)),
            ],
        );
        assign(
            "delegate",
            vec![
                ("parent_session_id", text("root")),
                ("model_config", text(r#"{"_delegate_from": "root"}"#)),
                ("input_tokens", Value::Integer(5)),
                ("output_tokens", Value::Integer(7)),
                ("estimated_cost_usd", Value::Real(0.5)),
            ],
        );
        assign("child", vec![("parent_session_id", text("tip"))]);
        assign("broken", vec![("model_config", text("{not json"))]);
        append(&*db, "tip", vec![message("user", "late", 50.0)]).unwrap();
        let derived = |d: Derived| {
            let query = Query {
                select: vec![Term::Column("id".into()), Term::Derived(d)],
                ..sessions_query(Filter::All)
            };
            column(&db.query(&query).unwrap(), d.name())
        };
        // Ids in order: branch, broken, child, cont, delegate, root, tip.
        let ints = |v: &[i64]| v.iter().map(|&n| Value::Integer(n)).collect::<Vec<_>>();
        assert_eq!(derived(Derived::Listed), ints(&[1, 1, 0, 0, 0, 1, 0]));
        assert_eq!(
            derived(Derived::DelegateFrom),
            [
                Value::Null,
                Value::Null,
                Value::Null,
                Value::Null,
                text("root"),
                Value::Null,
                Value::Null
            ]
        );
        assert_eq!(
            derived(Derived::ChainLastActive)[5..],
            [Value::Real(50.0), Value::Real(50.0)]
        );
        assert_eq!(derived(Derived::ChainLastActive)[0], Value::Real(4.0));
        assert_eq!(
            derived(Derived::ChainIds)[5],
            text("root\u{1f}cont\u{1f}tip")
        );
        assert_eq!(
            derived(Derived::ChainTitles)[5],
            text("an-94 plan\u{1f}\u{1f}tip")
        );
        assert_eq!(
            derived(Derived::ChainTitlesCompact)[5],
            text("an94plan\u{1f}\u{1f}tip")
        );
        // A session that starts no chain is its own chain.
        assert_eq!(derived(Derived::ChainIds)[1], text("broken"));
        assert_eq!(derived(Derived::ChainTitles)[6], text("tip"));
        assert_eq!(derived(Derived::ChainTitlesCompact)[6], text("tip"));
        assert_eq!(derived(Derived::TotalTokens)[4], Value::Integer(12));
        assert_eq!(derived(Derived::CostUsd)[4], Value::Real(0.5));
        // Nothing known: zero (SQLite's integer 0, PostgreSQL's double precision 0).
        let no_cost = &derived(Derived::CostUsd)[0];
        assert!(
            matches!(no_cost, Value::Integer(0)) || *no_cost == Value::Real(0.0),
            "{no_cost:?}"
        );
        // A chain that loops ends.
        assign("root", vec![("parent_session_id", text("cont"))]);
        assert_eq!(
            derived(Derived::ChainIds)[5],
            text("root\u{1f}cont\u{1f}tip")
        );
        // Listing filters on a derived value.
        let listed = Filter::Compare(Term::Derived(Derived::Listed), Cmp::Eq, Value::Integer(1));
        assert_eq!(db.count(Relation::Sessions, &listed).unwrap(), 2);
    });
}

#[test]
fn vacuum_keeps_every_row_and_the_store_writes_on() {
    on_every_backend(|open| {
        let db = open();
        create(&*db, "s", "cli", 1.0);
        let big = "x".repeat(4000);
        let rows = (0..200)
            .map(|i| message("user", &big, f64::from(i)))
            .collect();
        append(&*db, "s", rows).unwrap();
        create(&*db, "kept", "cli", 2.0);
        append(&*db, "kept", vec![message("user", "kept", 1.0)]).unwrap();
        db.write(WriteOp::Delete(Delete {
            relation: Relation::Messages,
            filter: Filter::eq("session_id", "s"),
        }))
        .unwrap();
        db.vacuum().unwrap();
        assert_eq!(db.live_message_count("s").unwrap(), Some(0));
        assert_eq!(
            column(&db.messages("kept", false).unwrap(), "content"),
            [text("kept")]
        );
        append(&*db, "s", vec![message("user", "after", 1.0)]).unwrap();
        assert_eq!(db.live_message_count("s").unwrap(), Some(1));
    });
}

#[test]
fn the_session_list_is_newest_first_by_source_in_pages() {
    on_every_backend(|open| {
        let db = open();
        for (id, source, started) in [
            ("a", "cli", 1.0),
            ("b", "tg", 2.0),
            ("c", "cli", 3.0),
            ("d", "cli", 3.0),
        ] {
            create(&*db, id, source, started);
        }
        let list = |source: Option<&str>, limit, offset| {
            let page = Page {
                source: source.map(String::from),
                session_id: None,
                limit,
                offset,
            };
            ids(&db.list_sessions(&page).unwrap())
        };
        assert_eq!(
            list(None, 10, 0),
            [text("d"), text("c"), text("b"), text("a")]
        );
        assert_eq!(list(Some("cli"), 2, 0), [text("d"), text("c")]);
        assert_eq!(list(Some("cli"), 2, 2), [text("a")]);
        assert_eq!(list(Some("none"), 10, 0), Vec::<Value>::new());
        let every_column = db
            .list_sessions(&Page {
                limit: 1,
                ..Page::default()
            })
            .unwrap();
        assert_eq!(
            every_column.columns.len(),
            db.columns().of(Relation::Sessions).len()
        );
    });
}

#[test]
fn a_transaction_writes_all_or_nothing() {
    on_every_backend(|open| {
        let db = open();
        create(&*db, "s", "cli", 1.0);
        let title = set(
            Relation::Sessions,
            Filter::eq("id", "s"),
            vec![("title", Assign::Value(text("kept")))],
        );
        let add = WriteOp::Append {
            session_id: "s".into(),
            rows: vec![message("user", "in the transaction", 1.0)],
            once_key: None,
        };
        let failing = WriteOp::Append {
            session_id: "missing".into(),
            rows: vec![message("user", "x", 1.0)],
            once_key: None,
        };
        let err = db
            .write(WriteOp::Transaction(vec![
                title.clone(),
                add.clone(),
                failing,
            ]))
            .unwrap_err();
        assert!(matches!(err, Error::SessionNotFound { .. }));
        assert_eq!(session_value(&*db, "s", "title"), Value::Null);
        assert_eq!(db.live_message_count("s").unwrap(), Some(0));
        assert_eq!(db.own_appends("s"), 0);
        let out = db.write(WriteOp::Transaction(vec![title, add])).unwrap();
        assert!(matches!(&out, WriteOut::Many(outs) if outs.len() == 2));
        assert_eq!(out.rows(), 2);
        assert_eq!(db.live_message_count("s").unwrap(), Some(1));
        assert_eq!(db.own_appends("s"), 1);
    });
}

#[test]
fn search_finds_cjk_text_by_trigrams_and_by_substring() {
    on_every_backend(|open| {
        let db = open();
        create(&*db, "a", "cli", 1.0);
        let chat = "昨天和其他Agent的聊天记录，记忆断裂问题复现了";
        let long = append(&*db, "a", vec![message("user", chat, 1.0)]).unwrap();
        let percent = append(&*db, "a", vec![message("user", "达成100%完成率", 2.0)]).unwrap();
        append(&*db, "a", vec![message("user", "达成100完成率是目标", 3.0)]).unwrap();
        let search = |query: &str| {
            let search = Search {
                query: query.into(),
                limit: 10,
                ..Search::default()
            };
            ids(&db.search(&search).unwrap())
        };
        // Three characters or more: the trigram index; fewer: a substring scan.
        assert_eq!(search("记忆断裂"), [Value::Integer(long[0])]);
        assert_eq!(search("聊天"), [Value::Integer(long[0])]);
        assert_eq!(search("Agent的"), [Value::Integer(long[0])]);
        assert_eq!(search("100%完成"), [Value::Integer(percent[0])]);
        assert_eq!(search("记忆断裂 OR 目标").len(), 2);
        assert_eq!(search("达成 NOT 目标"), [Value::Integer(percent[0])]);
        assert!(search("断裂连接").is_empty());
    });
}

#[test]
fn search_index_upkeep_runs_on_every_index_and_keeps_every_hit() {
    on_every_backend(|open| {
        let db = open();
        create(&*db, "a", "cli", 1.0);
        for text in ["docker one", "docker two", "记忆断裂"] {
            append(&*db, "a", vec![message("user", text, 1.0)]).unwrap();
        }
        let hits = |query: &str| {
            let search = Search {
                query: query.into(),
                limit: 10,
                ..Search::default()
            };
            db.search(&search).unwrap().rows().count()
        };
        for upkeep in [IndexUpkeep::Optimize, IndexUpkeep::Rebuild] {
            assert_eq!(
                db.write(WriteOp::SearchIndex(upkeep)).unwrap(),
                WriteOut::Rows(2)
            );
            assert_eq!((hits("docker"), hits("记忆断裂")), (2, 1), "{upkeep:?}");
        }
    });
}

/// The content of every hit of `query` (up to 100), sorted; or the error.
fn hits(db: &dyn Backend, query: &str) -> Result<Vec<String>, Error> {
    let search = Search {
        query: query.into(),
        limit: 100,
        ..Search::default()
    };
    let found = db.search(&search)?;
    if found.columns.is_empty() {
        return Ok(Vec::new());
    }
    let mut contents: Vec<String> = column(&found, "content")
        .into_iter()
        .map(|c| match c {
            Value::Text(t) => t,
            other => format!("{other:?}"),
        })
        .collect();
    contents.sort();
    Ok(contents)
}

/// Messages every backend's search is compared on.
const CORPUS: [&str; 22] = [
    "notes: we looked at C++ today",
    "the chat-send endpoint failed",
    "TODO: fix the flaky test",
    "release P2.2 is out",
    "mail ada@example.com for access",
    "it's done",
    "C# and F# compilers",
    "docker compose up",
    "kubernetes cluster restarted",
    "docker and kubernetes together",
    "compose the docker file",
    "deployment deployed; deploys",
    "The Quick Brown Fox",
    "Crème brûlée, naïve façade",
    "数据库连接超时",
    "我们的数据库很快",
    "聊天记录和数据",
    "昨天和其他Agent的聊天记录，记忆断裂问题复现了",
    "达成100%完成率",
    "안녕하세요 반갑습니다",
    "こんにちは世界",
    "100% sure, 50%_off",
];

fn corpus(db: &dyn Backend) {
    create(db, "s", "cli", 1.0);
    for (n, text) in CORPUS.iter().enumerate() {
        append(db, "s", vec![message("user", text, n as f64)]).unwrap();
    }
    let mut tool = message("tool", "tool output text", 99.0);
    tool.tool_name = Some("web_search".into());
    tool.tool_calls = Some(r#"[{"function":{"name":"read_file"}}]"#.into());
    append(db, "s", vec![tool]).unwrap();
}

/// Queries of every kind: words, phrases, prefixes, the operators and how
/// they group, punctuation a person types, CJK terms of two and of three or
/// more characters, diacritics, tool names.
const QUERIES: [&str; 48] = [
    "docker",
    "DOCKER",
    "\"compose up\"",
    "\"up compose\"",
    "deploy*",
    "dep*",
    "\"docker c\"*",
    "docker OR kubernetes",
    "docker NOT kubernetes",
    "docker kubernetes",
    "docker AND kubernetes",
    "docker NOT compose up",
    "kubernetes OR docker compose",
    "docker NOT compose AND file",
    "C++",
    "chat-send",
    "TODO: fix",
    "P2.2",
    "ada@example.com",
    "it's",
    "C#",
    "NOT docker",
    "数据库",
    "聊天",
    "数据库 OR 聊天记录",
    "数据 NOT 连接",
    "记忆断裂",
    "Agent的",
    "100%完成",
    "完成率",
    "达成 NOT 目标",
    "안녕",
    "こんにちは",
    "断裂连接",
    "数据库 ab",
    "数据库 AND ab",
    "creme",
    "BRÛLÉE",
    "naive façade",
    "web_search",
    "read_file",
    "quick brown",
    "\"quick brown\"*",
    "%",
    "***",
    "",
    "100%",
    "50%_off",
];

#[test]
fn search_finds_the_same_hits_on_every_backend() {
    let found = std::cell::RefCell::new(Vec::new());
    on_every_backend(|open| {
        let db = open();
        corpus(&*db);
        let hits: Vec<Vec<String>> = QUERIES
            .iter()
            .map(|q| hits(&*db, q).unwrap_or_else(|e| panic!("{q:?}: {e}")))
            .collect();
        let expect = |query: &str, expected: &[&str]| {
            let at = QUERIES.iter().position(|q| *q == query).unwrap();
            let mut expected: Vec<String> = expected.iter().map(|e| e.to_string()).collect();
            expected.sort();
            assert_eq!(hits[at], expected, "{query:?}");
        };
        // The searches of issue 20 find their message.
        for (query, text) in [
            ("C++", CORPUS[0]),
            ("chat-send", CORPUS[1]),
            ("TODO: fix", CORPUS[2]),
            ("P2.2", CORPUS[3]),
            ("ada@example.com", CORPUS[4]),
            ("it's", CORPUS[5]),
        ] {
            assert!(
                hits[QUERIES.iter().position(|q| *q == query).unwrap()].contains(&text.to_string()),
                "{query:?}"
            );
        }
        expect("NOT docker", &[CORPUS[7], CORPUS[9], CORPUS[10]]);
        expect("数据库", &[CORPUS[14], CORPUS[15]]);
        expect("docker NOT compose up", &[CORPUS[9], CORPUS[10]]);
        expect("\"up compose\"", &[]);
        expect("creme", &[CORPUS[13]]);
        expect("web_search", &["tool output text"]);
        expect("数据库 ab", &[CORPUS[14], CORPUS[15]]);
        expect("数据库 AND ab", &[]);
        found.borrow_mut().push(hits);
    });
    let found = found.into_inner();
    for other in &found[1..] {
        for ((query, first), theirs) in QUERIES.iter().zip(&found[0]).zip(other) {
            assert_eq!(
                first, theirs,
                "{query:?}: SQLite's hits, then this backend's"
            );
        }
    }
}

/// A query from a soup of the corpus's words, the operators, the punctuation
/// FTS5 reads as syntax and random characters (ASCII, CJK, Hangul): what a
/// person or a fuzzer types.
fn random_query(rng: &mut fastrand::Rng) -> String {
    const SOUP: [&str; 36] = [
        "docker",
        "compose",
        "kubernetes",
        "the",
        "quick",
        "deploy",
        "数据库",
        "聊天",
        "记忆断裂",
        "数据",
        "ab",
        "C",
        "P2",
        "fix",
        "AND",
        "OR",
        "NOT",
        "NEAR",
        "\"",
        "*",
        "(",
        ")",
        ":",
        "-",
        "+",
        "^",
        "%",
        "_",
        ".",
        "'",
        "#",
        "@",
        ",",
        "\\",
        "é",
        "100%",
    ];
    let pieces = rng.usize(1..5);
    let mut query = String::new();
    for _ in 0..pieces {
        match rng.u8(0..16) {
            0 => query.push(rng.char('!'..='~')),
            1 => query.push(rng.char('\u{4E00}'..='\u{4E20}')),
            2 => query.push(rng.char('\u{AC00}'..='\u{AC05}')),
            _ => query.push_str(SOUP[rng.usize(..SOUP.len())]),
        }
        if rng.u8(0..4) > 0 {
            query.push(' ');
        }
    }
    query
}

#[test]
fn random_queries_run_and_find_the_same_hits_on_every_backend() {
    let found = std::cell::RefCell::new(Vec::new());
    on_every_backend(|open| {
        let db = open();
        corpus(&*db);
        let mut rng = fastrand::Rng::with_seed(20);
        let mut hits_of = Vec::new();
        for _ in 0..600 {
            let query = random_query(&mut rng);
            match hits(&*db, &query) {
                Ok(found) => hits_of.push((query, Some(found))),
                Err(Error::BadQuery { .. }) => hits_of.push((query, None)),
                Err(other) => panic!("{query:?}: {other}"),
            }
        }
        found.borrow_mut().push(hits_of);
    });
    let found = found.into_inner();
    let first = &found[0];
    let found_some = first
        .iter()
        .filter(|(_, hits)| hits.as_ref().is_some_and(|h| !h.is_empty()))
        .count();
    eprintln!("random queries with hits: {found_some} of {}", first.len());
    assert!(
        found_some > 100,
        "{found_some} queries of {} found something",
        first.len()
    );
    for other in &found[1..] {
        for (first, theirs) in first.iter().zip(other) {
            assert_eq!(first, theirs, "SQLite's hits, then this backend's");
        }
    }
}

#[test]
fn the_best_match_comes_first_and_time_orders_hold() {
    on_every_backend(|open| {
        let db = open();
        create(&*db, "s", "cli", 1.0);
        let long = "a long message that mentions the otter once among many other words of text";
        let ids = append(
            &*db,
            "s",
            vec![
                message("user", long, 3.0),
                message("user", "otter otter seal", 1.0),
                message("user", "the seal and an otter", 2.0),
            ],
        )
        .unwrap();
        let order = |order: SearchOrder| {
            let search = Search {
                query: "otter".into(),
                limit: 10,
                order,
                ..Search::default()
            };
            ids_of(&db.search(&search).unwrap())
        };
        // More occurrences in a shorter text first (bm25 on SQLite, ts_rank on PostgreSQL).
        assert_eq!(order(SearchOrder::Rank)[0], ids[1]);
        assert_eq!(order(SearchOrder::Rank)[2], ids[0]);
        assert_eq!(order(SearchOrder::Newest), [ids[0], ids[2], ids[1]]);
        assert_eq!(order(SearchOrder::Oldest), [ids[1], ids[2], ids[0]]);
    });
}

fn ids_of(table: &Table) -> Vec<i64> {
    ids(table)
        .into_iter()
        .map(|v| match v {
            Value::Integer(n) => n,
            other => panic!("an id, not {other:?}"),
        })
        .collect()
}

#[test]
fn a_search_finds_what_another_handle_just_committed() {
    on_every_backend(|open| {
        let (writer, reader) = (open(), open());
        create(&*writer, "s", "cli", 1.0);
        for n in 0..20 {
            let text = format!("meerkat number {n}");
            append(&*writer, "s", vec![message("user", &text, n as f64)]).unwrap();
            assert_eq!(hits(&*reader, "meerkat").unwrap().len(), n + 1);
        }
    });
}

#[test]
fn searches_beside_concurrent_writers_see_every_committed_row() {
    on_every_backend(|open| {
        let writers: Vec<Box<dyn Backend>> = (0..3).map(|_| open()).collect();
        let readers: Vec<Box<dyn Backend>> = (0..2).map(|_| open()).collect();
        create(&*writers[0], "s", "cli", 1.0);
        std::thread::scope(|scope| {
            for (w, db) in writers.iter().enumerate() {
                scope.spawn(move || {
                    for i in 0..30 {
                        let text = format!("lemur {w} {i}");
                        append(&**db, "s", vec![message("user", &text, i as f64)]).unwrap();
                    }
                });
            }
            for db in &readers {
                scope.spawn(move || {
                    let mut seen = 0;
                    for _ in 0..15 {
                        let now = hits(&**db, "lemur").unwrap().len();
                        assert!((seen..=90).contains(&now), "{seen} then {now}");
                        seen = now;
                    }
                });
            }
        });
        assert_eq!(hits(&*readers[0], "lemur").unwrap().len(), 90);
    });
}

#[test]
fn updated_and_deleted_messages_are_searched_as_they_are_now() {
    on_every_backend(|open| {
        let db = open();
        create(&*db, "s", "cli", 1.0);
        let ids = append(
            &*db,
            "s",
            vec![
                message("user", "the walrus speaks", 1.0),
                message("user", "the narwhal sings", 2.0),
                message("user", "记忆断裂问题", 3.0),
            ],
        )
        .unwrap();
        assert_eq!(hits(&*db, "walrus").unwrap().len(), 1);
        db.write(set(
            Relation::Messages,
            Filter::eq("id", ids[0]),
            vec![("content", Assign::Value(text("the seal speaks")))],
        ))
        .unwrap();
        assert!(hits(&*db, "walrus").unwrap().is_empty());
        assert_eq!(hits(&*db, "seal").unwrap(), ["the seal speaks"]);
        assert_eq!(hits(&*db, "speaks").unwrap(), ["the seal speaks"]);
        db.write(set(
            Relation::Messages,
            Filter::eq("id", ids[2]),
            vec![("content", Assign::Value(text("断裂连接")))],
        ))
        .unwrap();
        assert!(hits(&*db, "记忆断裂").unwrap().is_empty());
        assert_eq!(hits(&*db, "断裂连接").unwrap(), ["断裂连接"]);
        let delete = WriteOp::Delete(Delete {
            relation: Relation::Messages,
            filter: Filter::In(
                Term::Column("id".into()),
                vec![ids[1].into(), ids[2].into()],
            ),
        });
        db.write(delete).unwrap();
        assert!(hits(&*db, "narwhal").unwrap().is_empty());
        assert!(hits(&*db, "断裂连接").unwrap().is_empty());
        assert_eq!(hits(&*db, "the").unwrap(), ["the seal speaks"]);
    });
}

#[test]
fn search_finds_committed_rows_by_word_source_and_session() {
    on_every_backend(|open| {
        let db = open();
        create(&*db, "a", "cli", 1.0);
        create(&*db, "b", "telegram", 1.0);
        let a = append(&*db, "a", vec![message("user", "the docker daemon", 1.0)]).unwrap();
        let b = append(&*db, "b", vec![message("user", "docker compose up", 1.0)]).unwrap();
        append(&*db, "b", vec![message("user", "nothing to see", 1.0)]).unwrap();
        let search = |search: Search| ids(&db.search(&search).unwrap());
        let page = Search {
            query: "docker".into(),
            limit: 10,
            ..Search::default()
        };
        let mut all = search(page.clone());
        all.sort_by_key(|v| match v {
            Value::Integer(n) => *n,
            _ => 0,
        });
        assert_eq!(all, [Value::Integer(a[0]), Value::Integer(b[0])]);
        let telegram = Search {
            sources: Some(vec!["telegram".into()]),
            ..page.clone()
        };
        assert_eq!(search(telegram), [Value::Integer(b[0])]);
        let not_telegram = Search {
            exclude_sources: Some(vec!["telegram".into()]),
            ..page.clone()
        };
        assert_eq!(search(not_telegram), [Value::Integer(a[0])]);
        let in_a = Search {
            session_id: Some("a".into()),
            ..page.clone()
        };
        assert_eq!(search(in_a), [Value::Integer(a[0])]);
        // Whatever a person types runs.
        for typed in [
            "\"unbalanced",
            "C++",
            "a AND OR b",
            "(x",
            "***",
            "TODO: fix",
            "",
        ] {
            let typed = Search {
                query: typed.into(),
                ..page.clone()
            };
            assert!(db.search(&typed).is_ok(), "{typed:?}");
        }
        // A rewound row is not found.
        db.write(set(
            Relation::Messages,
            Filter::eq("id", a[0]),
            vec![("active", Assign::Value(Value::Integer(0)))],
        ))
        .unwrap();
        assert_eq!(search(page), [Value::Integer(b[0])]);
    });
}

#[test]
fn routing_and_meta_rows_are_written_read_and_deleted() {
    on_every_backend(|open| {
        let db = open();
        let route = |scope: &str, key: &str, entry: &str| {
            WriteOp::Insert(Insert {
                relation: Relation::GatewayRouting,
                values: vec![
                    ("scope".into(), text(scope)),
                    ("session_key".into(), text(key)),
                    ("entry_json".into(), text(entry)),
                    ("updated_at".into(), Value::Real(1.0)),
                ],
                on_conflict: OnConflict::Replace,
            })
        };
        for op in [
            route("", "k2", "{}"),
            route("", "k1", "{\"a\":1}"),
            route("other", "k1", "[]"),
            route("", "k2", "{\"b\":2}"),
        ] {
            db.write(op).unwrap();
        }
        let entries = |scope: &str| {
            let query = Query {
                select: vec![
                    Term::Column("session_key".into()),
                    Term::Column("entry_json".into()),
                ],
                filter: Filter::eq("scope", scope),
                order: vec![Order {
                    term: Term::Column("session_key".into()),
                    descending: false,
                }],
                ..Query::all(Relation::GatewayRouting)
            };
            let table = db.query(&query).unwrap();
            column(&table, "session_key")
                .into_iter()
                .zip(column(&table, "entry_json"))
                .collect::<Vec<_>>()
        };
        assert_eq!(
            entries(""),
            [
                (text("k1"), text("{\"a\":1}")),
                (text("k2"), text("{\"b\":2}"))
            ]
        );
        let gone = WriteOp::Delete(Delete {
            relation: Relation::GatewayRouting,
            filter: Filter::And(vec![
                Filter::eq("scope", ""),
                Filter::In(Term::Column("session_key".into()), vec![text("k1")]),
            ]),
        });
        assert_eq!(db.write(gone).unwrap(), WriteOut::Rows(1));
        assert_eq!(entries(""), [(text("k2"), text("{\"b\":2}"))]);
        assert_eq!(entries("other").len(), 1);
    });
}

#[test]
fn a_topic_binding_names_one_session_and_goes_with_it() {
    on_every_backend(|open| {
        let db = open();
        create(&*db, "s", "telegram", 1.0);
        create(&*db, "t", "telegram", 1.0);
        let bind = |thread: &str, session_id: &str| {
            db.write(WriteOp::Insert(Insert {
                relation: Relation::TelegramTopicBindings,
                values: vec![
                    ("chat_id".into(), text("c")),
                    ("thread_id".into(), text(thread)),
                    ("user_id".into(), text("u")),
                    ("session_key".into(), text("k")),
                    ("session_id".into(), text(session_id)),
                    ("linked_at".into(), Value::Real(1.0)),
                    ("updated_at".into(), Value::Real(1.0)),
                ],
                on_conflict: OnConflict::Fail,
            }))
        };
        assert_eq!(bind("1", "s").unwrap(), WriteOut::Rows(1));
        assert!(bind("2", "s").is_err(), "a session has one topic");
        assert!(bind("3", "missing").is_err(), "a binding names a session");
        assert_eq!(bind("4", "t").unwrap(), WriteOut::Rows(1));
        let gone = WriteOp::Delete(Delete {
            relation: Relation::Sessions,
            filter: Filter::eq("id", "s"),
        });
        assert_eq!(db.write(gone).unwrap(), WriteOut::Rows(1));
        let threads = Query {
            select: vec![Term::Column("thread_id".into())],
            ..Query::all(Relation::TelegramTopicBindings)
        };
        assert_eq!(
            column(&db.query(&threads).unwrap(), "thread_id"),
            [text("4")]
        );
    });
}

#[test]
fn platform_message_ids_are_found_per_session() {
    on_every_backend(|open| {
        let db = open();
        create(&*db, "s", "telegram", 1.0);
        create(&*db, "t", "telegram", 1.0);
        let mut row = message("user", "hi", 1.0);
        row.platform_message_id = Some("tg-42".into());
        append(&*db, "s", vec![row]).unwrap();
        assert!(db.has_platform_message_id("s", "tg-42").unwrap());
        assert!(!db.has_platform_message_id("t", "tg-42").unwrap());
        assert!(!db.has_platform_message_id("s", "tg-43").unwrap());
    });
}

#[test]
fn another_handles_commits_are_foreign_and_counted_live() {
    on_every_backend(|open| {
        let (a, b) = (open(), open());
        create(&*a, "s", "cli", 1.0);
        let _ = a.foreign_commit_since_last_look().unwrap();
        append(&*a, "s", vec![message("user", "mine", 1.0)]).unwrap();
        assert!(
            !a.foreign_commit_since_last_look().unwrap(),
            "own commits are not foreign"
        );
        append(&*b, "s", vec![message("user", "theirs", 1.0)]).unwrap();
        assert!(a.foreign_commit_since_last_look().unwrap());
        assert!(!a.foreign_commit_since_last_look().unwrap());
        assert_eq!(a.live_message_count("s").unwrap(), Some(2));
        assert_eq!((a.own_appends("s"), b.own_appends("s")), (1, 1));
    });
}

#[test]
fn every_relation_names_its_columns_and_its_key_is_among_them() {
    on_every_backend(|open| {
        let db = open();
        for relation in Relation::ALL {
            let columns = db.columns().of(relation);
            for key in relation.key() {
                assert!(columns.iter().any(|c| c == key), "{relation}: {columns:?}");
            }
        }
        assert!(matches!(
            db.location(),
            Location::File(_) | Location::Server(_)
        ));
        assert!(!db.location().to_string().is_empty());
    });
}

#[test]
fn stored_responses_are_inserted_read_and_deleted_by_id() {
    on_every_backend(|open| {
        let db = open();
        let insert = |id: &str, caller: &str| {
            db.write(WriteOp::Insert(Insert {
                relation: Relation::Responses,
                values: vec![
                    ("id".into(), text(id)),
                    ("caller".into(), text(caller)),
                    ("created_at".into(), Value::Real(1.0)),
                    ("response_json".into(), text("{}")),
                    ("conversation_json".into(), text("[]")),
                ],
                on_conflict: OnConflict::Fail,
            }))
        };
        assert_eq!(insert("r1", "a").unwrap(), WriteOut::Rows(1));
        assert_eq!(insert("r2", "b").unwrap(), WriteOut::Rows(1));
        assert!(insert("r1", "b").is_err(), "the id is the key");
        let callers = |id: &str| {
            let query = Query {
                select: vec![Term::Column("caller".into())],
                filter: Filter::eq("id", id),
                ..Query::all(Relation::Responses)
            };
            column(&db.query(&query).unwrap(), "caller")
        };
        assert_eq!(callers("r1"), [text("a")]);
        let gone = WriteOp::Delete(Delete {
            relation: Relation::Responses,
            filter: Filter::And(vec![Filter::eq("id", "r1"), Filter::eq("caller", "a")]),
        });
        assert_eq!(db.write(gone).unwrap(), WriteOut::Rows(1));
        assert!(callers("r1").is_empty());
        assert_eq!(callers("r2"), [text("b")]);
    });
}

#[test]
fn a_closed_store_refuses_every_operation_and_keeps_its_data() {
    on_every_backend(|open| {
        let db = open();
        create(&*db, "s", "cli", 1.0);
        append(&*db, "s", vec![message("user", "kept", 1.0)]).unwrap();
        db.close();
        db.close();
        let closed =
            |r: Result<(), Error>| assert!(matches!(r, Err(Error::Closed { .. })), "{r:?}");
        closed(append(&*db, "s", vec![message("user", "x", 1.0)]).map(drop));
        closed(db.live_message_count("s").map(drop));
        closed(db.session("s").map(drop));
        closed(db.query(&Query::all(Relation::Sessions)).map(drop));
        closed(db.count(Relation::Sessions, &Filter::All).map(drop));
        closed(db.foreign_commit_since_last_look().map(drop));
        closed(db.search(&Search::default()).map(drop));
        closed(db.vacuum());
        let again = open();
        assert_eq!(again.live_message_count("s").unwrap(), Some(1));
        assert_eq!(
            column(&again.messages("s", false).unwrap(), "content"),
            [text("kept")]
        );
    });
}

/// Every row of every relation copied from `source` into `target` in pages
/// of `limit`, sessions first, then their parents linked (as `hermes
/// migrate` does); the rows written.
fn copy_everything(source: &dyn Backend, target: &dyn Backend, limit: i64) -> u64 {
    let shared = |relation: Relation| -> Vec<String> {
        let theirs = target.columns().of(relation);
        source
            .columns()
            .of(relation)
            .iter()
            .filter(|c| theirs.contains(c))
            .cloned()
            .collect()
    };
    let parented = Filter::Not(Box::new(Filter::IsNull(Term::Column(
        "parent_session_id".into(),
    ))));
    let mut passes: Vec<(Relation, Filter)> = Relation::ALL
        .iter()
        .map(|&relation| (relation, Filter::All))
        .collect();
    passes.insert(1, (Relation::Sessions, parented));
    let mut written = 0;
    for (relation, filter) in passes {
        let columns = shared(relation);
        let mut after: Option<Vec<Value>> = None;
        loop {
            let page = store::copy::copy_page(
                source,
                target,
                relation,
                &columns,
                &filter,
                after.as_deref(),
                limit,
            )
            .unwrap();
            written += page.written;
            if (page.read as i64) < limit {
                break;
            }
            after = page.last_key;
        }
    }
    written
}

/// Every column of every row of `relation`, in key order.
fn every_row(db: &dyn Backend, relation: Relation) -> Vec<Vec<Value>> {
    let query = Query {
        order: relation
            .key()
            .iter()
            .map(|k| Order {
                term: Term::Column((*k).into()),
                descending: false,
            })
            .collect(),
        ..Query::all(relation)
    };
    let table = db.query(&query).unwrap();
    table
        .rows()
        .map(|r| (0..table.columns.len()).map(|i| owned(r.get(i))).collect())
        .collect()
}

/// A store holding something of every kind: a child session whose id sorts
/// before its parent's, messages with NUL bytes, the JSON content prefix,
/// JSON text as hermes-agent writes it (with spaces), a rewound row, a
/// timestamp no decimal prints exactly, and routing, meta and topic rows.
fn fill_with_everything(db: &dyn Backend) {
    create(db, "b-root", "telegram", 0.1 + 0.2);
    create(db, "a-child", "cli", 1.0 / 3.0);
    db.write(set(
        Relation::Sessions,
        Filter::eq("id", "a-child"),
        vec![
            ("parent_session_id", Assign::Value(text("b-root"))),
            ("title", Assign::Value(text("Child"))),
            ("handoff_state", Assign::Value(text("pending"))),
        ],
    ))
    .unwrap();
    let mut tool = message("assistant", "", 1.0 / 7.0);
    tool.content = Value::Null;
    tool.tool_calls = Some("[{\"id\": \"c1\", \"type\": \"function\"}]".into());
    tool.tool_call_count = 1;
    append(
        db,
        "b-root",
        vec![
            message(
                "user",
                "\0json:[{\"type\": \"text\", \"text\": \"heron\"}]",
                0.1 + 0.2,
            ),
            message("assistant", "a\0b\u{1}c", 2.5e-7),
            tool,
        ],
    )
    .unwrap();
    let child = append(db, "a-child", vec![message("user", "egret wader", 3.0)]).unwrap();
    append(db, "a-child", vec![message("user", "rewound", 4.0)]).unwrap();
    db.write(set(
        Relation::Messages,
        Filter::Compare(Term::Column("id".into()), Cmp::Gt, Value::Integer(child[0])),
        vec![("active", Assign::Value(Value::Integer(0)))],
    ))
    .unwrap();
    let insert = |relation, values: Vec<(&str, Value)>| {
        db.write(WriteOp::Insert(Insert {
            relation,
            values: values.into_iter().map(|(c, v)| (c.to_owned(), v)).collect(),
            on_conflict: OnConflict::Fail,
        }))
        .unwrap();
    };
    insert(
        Relation::GatewayRouting,
        vec![
            ("scope", text("")),
            ("session_key", text("agent:main:cli:dm:1")),
            ("entry_json", text("{\"session_id\": \"a-child\"}")),
            ("updated_at", Value::Real(5.5)),
        ],
    );
    insert(
        Relation::StateMeta,
        vec![("key", text("client_secret")), ("value", text("s3cret"))],
    );
    insert(
        Relation::TelegramTopicBindings,
        vec![
            ("chat_id", text("42")),
            ("thread_id", text("7")),
            ("user_id", text("42")),
            ("session_key", text("agent:main:telegram:dm:42:7")),
            ("session_id", text("b-root")),
            ("linked_at", Value::Real(6.0)),
            ("updated_at", Value::Real(6.0)),
        ],
    );
}

#[test]
fn a_copy_carries_every_row_as_it_is_once_and_back() {
    on_every_backend(|open| {
        let dir = tempfile::tempdir().unwrap();
        let source = sqlite(&dir).unwrap()();
        fill_with_everything(&*source);
        let target = open();
        // Pages of 2: sessions, messages and keys cross page boundaries.
        let written = copy_everything(&*source, &*target, 2);
        assert!(written >= 10, "{written} rows written");
        for relation in Relation::ALL {
            assert_eq!(
                every_row(&*target, relation),
                every_row(&*source, relation),
                "{relation}"
            );
        }
        assert_eq!(target.live_message_count("b-root").unwrap(), Some(3));
        assert_eq!(target.live_message_count("a-child").unwrap(), Some(1));
        assert_eq!(
            session_value(&*target, "a-child", "parent_session_id"),
            text("b-root")
        );
        assert_eq!(
            session_value(&*target, "b-root", "tool_call_count"),
            Value::Integer(1)
        );
        // The search finds imported rows, a rewound one not.
        let found = |query: &str| {
            let search = Search {
                query: query.into(),
                limit: 10,
                ..Search::default()
            };
            target.search(&search).unwrap().row_count()
        };
        assert_eq!((found("egret"), found("rewound")), (1, 0));
        // Again: nothing new, nothing twice.
        assert_eq!(copy_everything(&*source, &*target, 2), 0);
        assert_eq!(every_row(&*target, Relation::Messages).len(), 5);
        // New rows of the source follow; the target's own next id is past every copied one.
        let late = append(&*source, "a-child", vec![message("user", "late", 8.0)]).unwrap();
        assert_eq!(copy_everything(&*source, &*target, 2), 1);
        let own = append(&*target, "b-root", vec![message("user", "own", 9.0)]).unwrap();
        assert!(own[0] > late[0], "{own:?} after {late:?}");
        assert_eq!(target.live_message_count("a-child").unwrap(), Some(2));
        // And back into a new file: the same rows again.
        let back_dir = tempfile::tempdir().unwrap();
        let back = sqlite(&back_dir).unwrap()();
        copy_everything(&*target, &*back, 3);
        for relation in Relation::ALL {
            assert_eq!(
                every_row(&*back, relation),
                every_row(&*target, relation),
                "{relation} back"
            );
        }
    });
}

#[test]
fn an_import_of_ids_that_are_other_messages_or_sessions_that_are_not_there_writes_nothing() {
    on_every_backend(|open| {
        let db = open();
        create(&*db, "here", "cli", 1.0);
        let [id] = append(&*db, "here", vec![message("user", "mine", 1.0)]).unwrap()[..] else {
            panic!("one id");
        };
        let columns: Vec<String> = ["id", "session_id", "role", "content", "timestamp"]
            .map(String::from)
            .into();
        let row = |id: i64, session: &str, content: &str| {
            vec![
                Value::Integer(id),
                text(session),
                text("user"),
                text(content),
                Value::Real(2.0),
            ]
        };
        let import = |rows| {
            db.write(WriteOp::Import(store::Import {
                relation: Relation::Messages,
                columns: columns.clone(),
                rows,
            }))
        };
        create(&*db, "other", "cli", 1.0);
        let clash = import(vec![
            row(id + 1, "other", "new"),
            row(id, "other", "theirs"),
        ]);
        let text_of = |e: Error| e.to_string();
        let clash = text_of(clash.unwrap_err());
        assert!(
            clash.contains(&format!("message {id}")) && clash.contains("\"here\""),
            "{clash}"
        );
        let orphan = text_of(import(vec![row(id + 5, "nowhere", "lost")]).unwrap_err());
        assert!(orphan.contains("\"nowhere\""), "{orphan}");
        assert_eq!(
            every_row(&*db, Relation::Messages).len(),
            1,
            "nothing written"
        );
        assert_eq!(db.live_message_count("other").unwrap(), Some(0));
        // The same message again is no clash: it is there already.
        assert_eq!(
            import(vec![row(id, "here", "mine")]).unwrap(),
            WriteOut::Ids(vec![])
        );
    });
}
