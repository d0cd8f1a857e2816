//! The SQL of an import (`store::Import`): rows copied from another store,
//! inside the batch's open transaction. Each row is inserted unless its key
//! is there; the new messages' ids go back to the batch, which indexes them
//! as it indexes appended rows.

use rusqlite::{params_from_iter, Connection, OptionalExtension};

use super::error::At;
use super::sql::Sql;
use super::SqliteBackend;
use crate::error::Result;
use crate::model::Value;
use crate::store::{Import, Relation, WriteOut};

impl SqliteBackend {
    pub(super) fn import(&self, conn: &Connection, import: &Import) -> Result<WriteOut> {
        import.check(&self.columns)?;
        let at = &self.at;
        let relation = import.relation;
        if relation == Relation::Messages {
            self.check_sessions_exist(conn, import)?;
        }
        // A parent is linked once it is here (below), so rows may come in any order.
        let parent = match relation {
            Relation::Sessions => import.position("parent_session_id"),
            _ => None,
        };
        let sql = Sql::import(import);
        let mut insert = conn.prepare_cached(&sql.text).at(at)?;
        let mut inserted = Vec::with_capacity(import.rows.len());
        for (n, row) in import.rows.iter().enumerate() {
            let values =
                row.iter()
                    .enumerate()
                    .map(|(i, v)| if Some(i) == parent { &Value::Null } else { v });
            if insert.execute(params_from_iter(values)).at(at)? == 1 {
                inserted.push(n);
            }
        }
        drop(insert);
        match relation {
            Relation::Messages => self.imported_messages(conn, import, &inserted),
            Relation::Sessions => {
                if let Some(parent) = parent {
                    self.link_parents(conn, import, parent)?;
                }
                let sessions = import.texts("id");
                self.recount(conn, inserted.iter().filter_map(|&n| sessions[n]).collect())?;
                Ok(WriteOut::Rows(inserted.len() as u64))
            }
            _ => Ok(WriteOut::Rows(inserted.len() as u64)),
        }
    }

    /// Refuses messages of a session this file does not have.
    fn check_sessions_exist(&self, conn: &Connection, import: &Import) -> Result<()> {
        let sessions = serde_json::to_string(&import.message_sessions()).expect("ids serialize");
        let missing: Vec<String> = conn
            .prepare_cached(
                "SELECT value FROM json_each(?1)
                 WHERE value NOT IN (SELECT id FROM sessions) ORDER BY value",
            )
            .and_then(|mut s| s.query_map([sessions], |r| r.get(0))?.collect())
            .at(&self.at)?;
        if missing.is_empty() {
            Ok(())
        } else {
            Err(import.orphans(&self.at, &missing))
        }
    }

    /// The rows `inserted` (positions in `import.rows`) recounted into their
    /// sessions; every other row's id must be the same message here.
    fn imported_messages(
        &self,
        conn: &Connection,
        import: &Import,
        inserted: &[usize],
    ) -> Result<WriteOut> {
        let at = &self.at;
        let message_ids = import.message_ids();
        let sessions = import.texts("session_id");
        let mut new = inserted.iter().copied().peekable();
        let mut existing = conn
            .prepare_cached("SELECT session_id FROM messages WHERE id = ?1")
            .at(at)?;
        for (n, (&id, ours)) in message_ids.iter().zip(&sessions).enumerate() {
            if new.next_if_eq(&n).is_some() {
                continue;
            }
            let theirs: Option<String> =
                existing.query_row([id], |r| r.get(0)).optional().at(at)?;
            let ours = ours.unwrap_or_default();
            if let Some(theirs) = theirs.filter(|theirs| theirs != ours) {
                return Err(import.collision(at, id, ours, &theirs));
            }
        }
        drop(existing);
        self.recount(conn, inserted.iter().filter_map(|&n| sessions[n]).collect())?;
        let mut ids: Vec<i64> = inserted.iter().map(|&n| message_ids[n]).collect();
        ids.sort_unstable();
        Ok(WriteOut::Ids(ids))
    }

    /// Gives each imported session without a parent here the parent it has
    /// in `import`, once that parent is here.
    fn link_parents(&self, conn: &Connection, import: &Import, parent: usize) -> Result<()> {
        let ids = import.texts("id");
        let mut link = conn
            .prepare_cached(
                "UPDATE sessions SET parent_session_id = ?2
                 WHERE id = ?1 AND parent_session_id IS NULL
                   AND EXISTS (SELECT 1 FROM sessions AS p WHERE p.id = ?2)",
            )
            .at(&self.at)?;
        for (row, id) in import.rows.iter().zip(ids) {
            if let (Some(id), Value::Text(parent)) = (id, &row[parent]) {
                link.execute([id, parent.as_str()]).at(&self.at)?;
            }
        }
        Ok(())
    }
}
