//! The SQL of each write, inside the batch's open transaction.

use rusqlite::{params, params_from_iter, Connection, Statement};

use super::error::At;
use super::search_index::{self, IndexPlan, INDEXED_COLUMNS};
use super::sql::Sql;
use super::SqliteBackend;
use crate::error::{Error, Result};
use crate::model::NewMessage;
use crate::store::columns::Use;
use crate::store::{Delete, Insert, NoMatch, Relation, Update, WriteOp, WriteOut};

impl SqliteBackend {
    pub(super) fn apply(
        &self,
        conn: &Connection,
        index: &IndexPlan,
        op: &WriteOp,
    ) -> Result<WriteOut> {
        match op {
            WriteOp::Append {
                session_id,
                rows,
                once_key,
            } => {
                if let Some(key) = once_key {
                    if !self.first_time(conn, key)? {
                        return Ok(WriteOut::Ids(Vec::new()));
                    }
                }
                self.append_rows(conn, session_id, rows).map(WriteOut::Ids)
            }
            WriteOp::Insert(insert) => self.insert(conn, insert),
            WriteOp::Update(update) => self.update(conn, index, update),
            WriteOp::Delete(delete) => self.delete(conn, index, delete),
            WriteOp::Transaction(ops) => ops
                .iter()
                .map(|op| self.apply(conn, index, op))
                .collect::<Result<_>>()
                .map(WriteOut::Many),
            WriteOp::SearchIndex(upkeep) => search_index::upkeep(conn, *upkeep)
                .at(&self.at)
                .map(WriteOut::Rows),
            WriteOp::Import(import) => self.import(conn, import),
        }
    }

    /// Records `key` in `state_meta`; false if it was there already.
    fn first_time(&self, conn: &Connection, key: &str) -> Result<bool> {
        let at = &self.at;
        let seen = conn
            .prepare_cached("SELECT 1 FROM state_meta WHERE key = ?1")
            .and_then(|mut s| s.exists([key]))
            .at(at)?;
        if !seen {
            conn.prepare_cached("INSERT INTO state_meta (key, value) VALUES (?1, ?2)")
                .and_then(|mut s| s.execute(params![key, crate::model::now().to_string()]))
                .at(at)?;
        }
        Ok(!seen)
    }

    /// Inserts `rows` and moves the session's counters in the same
    /// transaction, so `message_count` always equals the active rows. A
    /// session that receives messages is open again: `ended_at` is cleared.
    fn append_rows(
        &self,
        conn: &Connection,
        session_id: &str,
        rows: &[NewMessage],
    ) -> Result<Vec<i64>> {
        let at = &self.at;
        if rows.is_empty() {
            return Ok(Vec::new());
        }
        let tool_calls: i64 = rows.iter().map(|r| r.tool_call_count).sum();
        let touched = conn
            .prepare_cached(
                "UPDATE sessions SET message_count = COALESCE(message_count, 0) + ?1,
                 tool_call_count = COALESCE(tool_call_count, 0) + ?2,
                 ended_at = NULL, end_reason = NULL WHERE id = ?3",
            )
            .and_then(|mut s| s.execute(params![rows.len() as i64, tool_calls, session_id]))
            .at(at)?;
        if touched == 0 {
            return Err(self.not_found(session_id));
        }
        let mut insert = conn
            .prepare_cached(
                "INSERT INTO messages (session_id, role, content, tool_call_id, tool_calls,
                 tool_name, effect_disposition, timestamp, token_count, finish_reason, reasoning,
                 reasoning_content, reasoning_details, codex_reasoning_items, codex_message_items,
                 platform_message_id, observed, active, api_content)
                 VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12, ?13, ?14, ?15, ?16,
                 ?17, 1, ?18)",
            )
            .at(at)?;
        let mut ids = Vec::with_capacity(rows.len());
        for row in rows {
            ids.push(insert_row(&mut insert, session_id, row).at(at)?);
        }
        Ok(ids)
    }

    fn insert(&self, conn: &Connection, insert: &Insert) -> Result<WriteOut> {
        let relation = insert.relation;
        if !relation.insertable() {
            return Err(Error::Config(format!(
                "{}: messages are written only by an append (which moves the session's \
                 counters with them), not by an insert",
                self.at
            )));
        }
        let names = insert.values.iter().map(|(c, _)| c.as_str());
        self.columns.check_all(relation, names, Use::Insert)?;
        let sql = Sql::insert(insert);
        let n = conn
            .prepare_cached(&sql.text)
            .and_then(|mut s| s.execute(params_from_iter(&sql.params)))
            .at(&self.at)?;
        Ok(WriteOut::Rows(n as u64))
    }

    fn update(&self, conn: &Connection, index: &IndexPlan, update: &Update) -> Result<WriteOut> {
        let relation = update.relation;
        let names = update.set.iter().map(|(c, _)| c.as_str());
        self.columns.check_all(relation, names, Use::Set)?;
        update.filter.check(relation, &self.columns)?;
        if update.set.is_empty() {
            return Ok(WriteOut::Rows(0));
        }
        let changed = if relation == Relation::Messages {
            let sql = Sql::update(update, Some("id, session_id"));
            let rows = self.changed_messages(conn, &sql)?;
            let sets = |names: &[&str]| update.set.iter().any(|(c, _)| names.contains(&c.as_str()));
            self.after_message_change(
                conn,
                index,
                &rows,
                sets(&INDEXED_COLUMNS),
                sets(&["active"]),
            )?;
            rows.len()
        } else {
            let sql = Sql::update(update, None);
            conn.prepare_cached(&sql.text)
                .and_then(|mut s| s.execute(params_from_iter(&sql.params)))
                .at(&self.at)?
        };
        match &update.must_match {
            Some(NoMatch::Session(id)) if changed == 0 => Err(self.not_found(id)),
            Some(NoMatch::Rows) if changed == 0 => Err(Error::NoMatch {
                relation,
                at: self.at.clone(),
            }),
            _ => Ok(WriteOut::Rows(changed as u64)),
        }
    }

    fn delete(&self, conn: &Connection, index: &IndexPlan, delete: &Delete) -> Result<WriteOut> {
        delete.filter.check(delete.relation, &self.columns)?;
        let deleted = if delete.relation == Relation::Messages {
            let sql = Sql::delete(delete, Some("id, session_id"));
            let rows = self.changed_messages(conn, &sql)?;
            self.after_message_change(conn, index, &rows, true, true)?;
            rows.len()
        } else {
            let sql = Sql::delete(delete, None);
            conn.prepare_cached(&sql.text)
                .and_then(|mut s| s.execute(params_from_iter(&sql.params)))
                .at(&self.at)?
        };
        Ok(WriteOut::Rows(deleted as u64))
    }

    /// Runs an update or delete of messages that returns `id, session_id`
    /// of each row it changed.
    fn changed_messages(&self, conn: &Connection, sql: &Sql<'_>) -> Result<Vec<(i64, String)>> {
        conn.prepare_cached(&sql.text)
            .and_then(|mut s| {
                s.query_map(params_from_iter(&sql.params), |r| {
                    Ok((r.get(0)?, r.get(1)?))
                })?
                .collect()
            })
            .at(&self.at)
    }

    /// After messages changed: their search-index rows follow their text
    /// (`reindex`), and the sessions they belong to get their
    /// `message_count` recounted from the active rows (`recount`).
    fn after_message_change(
        &self,
        conn: &Connection,
        index: &IndexPlan,
        rows: &[(i64, String)],
        reindex: bool,
        recount: bool,
    ) -> Result<()> {
        if rows.is_empty() {
            return Ok(());
        }
        let at = &self.at;
        if reindex {
            let ids: Vec<i64> = rows.iter().map(|(id, _)| *id).collect();
            let ids = serde_json::to_string(&ids).expect("ids serialize");
            index.reindex_rows(conn, &ids, rows.len()).at(at)?;
        }
        if recount {
            self.recount(conn, rows.iter().map(|(_, s)| s.as_str()).collect())?;
        }
        Ok(())
    }

    /// Sets the `message_count` of `sessions` (repeats allowed) to their
    /// active rows.
    pub(super) fn recount(&self, conn: &Connection, mut sessions: Vec<&str>) -> Result<()> {
        if sessions.is_empty() {
            return Ok(());
        }
        sessions.sort_unstable();
        sessions.dedup();
        let sessions = serde_json::to_string(&sessions).expect("ids serialize");
        conn.prepare_cached(
            "UPDATE sessions SET message_count = (SELECT COUNT(*) FROM messages
             WHERE session_id = sessions.id AND active = 1)
             WHERE id IN (SELECT value FROM json_each(?1))",
        )
        .and_then(|mut s| s.execute([sessions]))
        .at(&self.at)?;
        Ok(())
    }
}

fn insert_row(stmt: &mut Statement<'_>, session_id: &str, m: &NewMessage) -> rusqlite::Result<i64> {
    stmt.insert(params![
        session_id,
        m.role,
        m.content,
        m.tool_call_id,
        m.tool_calls,
        m.tool_name,
        m.effect_disposition,
        m.timestamp,
        m.token_count,
        m.finish_reason,
        m.reasoning,
        m.reasoning_content,
        m.reasoning_details,
        m.codex_reasoning_items,
        m.codex_message_items,
        m.platform_message_id,
        m.observed as i64,
        m.api_content,
    ])
}

#[cfg(test)]
mod tests {
    use super::super::test_support::*;
    use crate::error::Error;
    use crate::model::{Value, ValueRef};
    use crate::store::{
        Assign, Backend, Cmp, Delete, Filter, Insert, NoMatch, OnConflict, Relation, Term, Update,
        WriteOp, WriteOut,
    };

    fn update(relation: Relation, filter: Filter, set: Vec<(&str, Assign)>) -> Update {
        Update {
            relation,
            filter,
            set: set.into_iter().map(|(c, a)| (c.to_owned(), a)).collect(),
            must_match: None,
        }
    }

    fn column(db: &super::SqliteBackend, session: &str, name: &str) -> Value {
        let table = db.session(session).unwrap();
        let row = table.rows().next().unwrap();
        let index = row.columns().iter().position(|c| c == name).unwrap();
        match row.get(index) {
            ValueRef::Null => Value::Null,
            ValueRef::Integer(n) => Value::Integer(n),
            ValueRef::Real(x) => Value::Real(x),
            ValueRef::Text(t) => Value::Text(String::from_utf8(t.to_vec()).unwrap()),
            ValueRef::Blob(b) => Value::Blob(b.to_vec()),
        }
    }

    #[test]
    fn counts_move_with_rows() {
        let dir = tempfile::tempdir().unwrap();
        let db = open(&dir);
        create(&db, "s");
        append(&db, "s", 3).unwrap();
        append(&db, "s", 2).unwrap();
        assert_eq!(db.live_message_count("s").unwrap(), Some(5));
        assert_eq!(db.messages("s", false).unwrap().rows().count(), 5);
    }

    #[test]
    fn appending_reopens_an_ended_session() {
        let dir = tempfile::tempdir().unwrap();
        let db = open(&dir);
        create(&db, "s");
        let ended = update(
            Relation::Sessions,
            Filter::eq("id", "s"),
            vec![
                ("ended_at", Assign::Value(Value::Real(2.0))),
                ("end_reason", Assign::Value("user_exit".into())),
            ],
        );
        db.write(WriteOp::Update(ended)).unwrap();
        append(&db, "s", 1).unwrap();
        assert_eq!(column(&db, "s", "ended_at"), Value::Null);
    }

    #[test]
    fn append_to_missing_session_commits_nothing() {
        let dir = tempfile::tempdir().unwrap();
        let db = open(&dir);
        let err = append(&db, "nope", 2).unwrap_err();
        assert!(matches!(err, Error::SessionNotFound { .. }));
        assert_eq!(rows_of(&db, "SELECT COUNT(*) FROM messages"), 0);
    }

    #[test]
    fn an_insert_merges_or_replaces_or_keeps_a_row_with_the_same_key() {
        let dir = tempfile::tempdir().unwrap();
        let db = open(&dir);
        let session = |title: Option<&str>, on_conflict| {
            let mut values = vec![
                ("id".to_owned(), Value::from("s")),
                ("source".to_owned(), Value::from("cli")),
                ("started_at".to_owned(), Value::from(1.0)),
            ];
            values.push(("title".to_owned(), title.into()));
            db.write(WriteOp::Insert(Insert {
                relation: Relation::Sessions,
                values,
                on_conflict,
            }))
        };
        session(None, OnConflict::FillNulls).unwrap();
        session(Some("first"), OnConflict::FillNulls).unwrap();
        session(Some("second"), OnConflict::FillNulls).unwrap();
        assert_eq!(column(&db, "s", "title"), Value::from("first"));
        assert_eq!(
            session(Some("x"), OnConflict::Ignore).unwrap(),
            WriteOut::Rows(0)
        );
        session(Some("third"), OnConflict::Replace).unwrap();
        assert_eq!(column(&db, "s", "title"), Value::from("third"));
        let err = session(Some("y"), OnConflict::Fail).unwrap_err();
        assert!(
            err.to_string().contains("UNIQUE constraint failed"),
            "{err}"
        );
        let counters = Insert {
            relation: Relation::Sessions,
            values: vec![("message_count".into(), Value::from(3))],
            on_conflict: OnConflict::Fail,
        };
        assert!(matches!(
            db.write(WriteOp::Insert(counters)),
            Err(Error::Config(_))
        ));
        let message = Insert {
            relation: Relation::Messages,
            values: vec![("role".into(), Value::from("user"))],
            on_conflict: OnConflict::Fail,
        };
        let err = db.write(WriteOp::Insert(message)).unwrap_err();
        assert!(err.to_string().contains("only by an append"), "{err}");
    }

    #[test]
    fn an_update_sets_and_adds_and_can_require_a_row() {
        let dir = tempfile::tempdir().unwrap();
        let db = open(&dir);
        create(&db, "s");
        let bump = |id: &str, must_match| {
            let mut u = update(
                Relation::Sessions,
                Filter::eq("id", id),
                vec![
                    ("rewind_count", Assign::Add(Value::Integer(2))),
                    ("title", Assign::Value("t".into())),
                ],
            );
            u.must_match = must_match;
            db.write(WriteOp::Update(u))
        };
        assert_eq!(bump("s", None).unwrap(), WriteOut::Rows(1));
        assert_eq!(bump("s", None).unwrap(), WriteOut::Rows(1));
        assert_eq!(column(&db, "s", "rewind_count"), Value::Integer(4));
        assert_eq!(bump("none", None).unwrap(), WriteOut::Rows(0));
        let missing = bump("none", Some(NoMatch::Session("none".into()))).unwrap_err();
        assert!(
            matches!(missing, Error::SessionNotFound { ref session_id, .. } if session_id == "none")
        );
        assert!(matches!(
            bump("none", Some(NoMatch::Rows)),
            Err(Error::NoMatch { .. })
        ));
        let key = update(
            Relation::Sessions,
            Filter::All,
            vec![("id", Assign::Value("x".into()))],
        );
        assert!(matches!(
            db.write(WriteOp::Update(key)),
            Err(Error::Config(_))
        ));
    }

    #[test]
    fn changing_which_messages_are_active_recounts_their_sessions() {
        let dir = tempfile::tempdir().unwrap();
        let db = open(&dir);
        create(&db, "a");
        create(&db, "b");
        append(&db, "a", 4).unwrap();
        append(&db, "b", 2).unwrap();
        // Rewind: a's messages from id 3 on become inactive.
        let rewind = update(
            Relation::Messages,
            Filter::And(vec![
                Filter::eq("session_id", "a"),
                Filter::Compare(Term::Column("id".into()), Cmp::Ge, Value::Integer(3)),
            ]),
            vec![("active", Assign::Value(Value::Integer(0)))],
        );
        assert_eq!(
            db.write(WriteOp::Update(rewind)).unwrap(),
            WriteOut::Rows(2)
        );
        assert_eq!(db.live_message_count("a").unwrap(), Some(2));
        assert_eq!(db.messages("a", false).unwrap().row_count(), 2);
        assert_eq!(db.live_message_count("b").unwrap(), Some(2));
        let gone = Delete {
            relation: Relation::Messages,
            filter: Filter::eq("session_id", "b"),
        };
        assert_eq!(db.write(WriteOp::Delete(gone)).unwrap(), WriteOut::Rows(2));
        assert_eq!(db.live_message_count("b").unwrap(), Some(0));
    }

    #[test]
    fn the_search_index_follows_updated_and_deleted_messages() {
        let dir = tempfile::tempdir().unwrap();
        let db = open(&dir);
        create(&db, "s");
        append_text(&db, "s", "the heron waits");
        append_text(&db, "s", "the egret flies");
        index_now(&db);
        let edit = update(
            Relation::Messages,
            Filter::eq("content", "the heron waits"),
            vec![("content", Assign::Value("the crane waits".into()))],
        );
        db.write(WriteOp::Update(edit)).unwrap();
        assert!(search_ids(&db, "heron").is_empty());
        assert_eq!(search_ids(&db, "crane"), vec![1]);
        let gone = Delete {
            relation: Relation::Messages,
            filter: Filter::eq("id", 2),
        };
        db.write(WriteOp::Delete(gone)).unwrap();
        assert!(search_ids(&db, "egret").is_empty());
        assert_eq!(indexed_rows(&db), 1, "no index row is left behind");
    }

    #[test]
    fn a_transaction_commits_all_of_its_writes_or_none() {
        let dir = tempfile::tempdir().unwrap();
        let db = open(&dir);
        create(&db, "s");
        let title = |t: &str| {
            WriteOp::Update(update(
                Relation::Sessions,
                Filter::eq("id", "s"),
                vec![("title", Assign::Value(t.into()))],
            ))
        };
        let failing = WriteOp::Transaction(vec![title("kept?"), set_meta("k", "v"), {
            let mut u = update(Relation::Sessions, Filter::eq("id", "x"), vec![]);
            u.set = vec![("title".into(), Assign::Value("y".into()))];
            u.must_match = Some(NoMatch::Rows);
            WriteOp::Update(u)
        }]);
        assert!(matches!(db.write(failing), Err(Error::NoMatch { .. })));
        assert_eq!(column(&db, "s", "title"), Value::Null);
        assert_eq!(
            rows_of(&db, "SELECT COUNT(*) FROM state_meta WHERE key = 'k'"),
            0
        );
        let fine = WriteOp::Transaction(vec![title("kept"), set_meta("k", "v")]);
        assert_eq!(
            db.write(fine).unwrap(),
            WriteOut::Many(vec![WriteOut::Rows(1), WriteOut::Rows(1)])
        );
        assert_eq!(column(&db, "s", "title"), Value::from("kept"));
    }
}
