//! The SQL of an import (`store::Import`) on PostgreSQL, inside the batch's
//! open transaction: every row in one statement (one array per column, each
//! value of its column's type), a row whose key is there already left as it
//! is. Messages keep their ids, so the identity sequence is moved past them
//! first: an append that follows never reuses one.

use tokio_postgres::types::{ToSql, Type};
use tokio_postgres::Client;

use super::error::classify;
use super::sql::Sql;
use super::value::{escape_text, integer, real, unescape_text};
use super::PgBackend;
use crate::error::{Error, Result};
use crate::model::Value;
use crate::store::{Import, Relation, WriteOut};

/// One column of the imported rows, as an array of its column's type.
enum Column {
    Integers(Vec<Option<i64>>),
    Reals(Vec<Option<f64>>),
    Texts(Vec<Option<String>>),
}

impl Column {
    fn param(&self) -> (&(dyn ToSql + Sync), Type) {
        match self {
            Column::Integers(v) => (v, Type::INT8_ARRAY),
            Column::Reals(v) => (v, Type::FLOAT8_ARRAY),
            Column::Texts(v) => (v, Type::TEXT_ARRAY),
        }
    }
}

/// Each value by `convert`, NULL as None; the first value it cannot convert
/// refuses the whole import.
fn each<'r, T>(
    values: impl Iterator<Item = &'r Value>,
    refuse: impl Fn(&Value) -> Error,
    convert: impl Fn(&Value) -> Option<T>,
) -> Result<Vec<Option<T>>> {
    values
        .map(|v| match v {
            Value::Null => Ok(None),
            v => convert(v).map(Some).ok_or_else(|| refuse(v)),
        })
        .collect()
}

impl PgBackend {
    pub(super) async fn import(&self, client: &Client, import: &Import) -> Result<WriteOut> {
        import.check(&self.columns)?;
        let relation = import.relation;
        if relation == Relation::Messages {
            self.check_sessions_exist(client, import).await?;
            self.move_ids_past(client, import).await?;
        }
        let parent = match relation {
            Relation::Sessions => import.position("parent_session_id"),
            _ => None,
        };
        let columns = import
            .columns
            .iter()
            .enumerate()
            .map(|(i, name)| self.column(import, i, name))
            .collect::<Result<Vec<Column>>>()?;
        let sql = Sql::import(&self.types, import, parent);
        let params: Vec<(&(dyn ToSql + Sync), Type)> = columns.iter().map(Column::param).collect();
        let inserted = client
            .query_typed(&sql.text, &params)
            .await
            .map_err(|e| classify(&self.at, e))?;
        match relation {
            Relation::Messages => {
                let mut ids: Vec<i64> = inserted.iter().map(|r| r.get(0)).collect();
                ids.sort_unstable();
                self.check_same_messages(client, import, &ids).await?;
                let sessions = import.texts("session_id");
                let message_ids = import.message_ids();
                let mut touched: Vec<String> = message_ids
                    .iter()
                    .zip(&sessions)
                    .filter(|(id, _)| ids.binary_search(id).is_ok())
                    .filter_map(|(_, s)| s.map(|s| escape_text(s).into_owned()))
                    .collect();
                touched.sort_unstable();
                touched.dedup();
                self.recount_sessions(client, &touched).await?;
                Ok(WriteOut::Ids(ids))
            }
            Relation::Sessions => {
                if let Some(parent) = parent {
                    self.link_parents(client, import, parent).await?;
                }
                let new: Vec<String> = inserted.iter().map(|r| r.get(0)).collect();
                self.recount_sessions(client, &new).await?;
                Ok(WriteOut::Rows(inserted.len() as u64))
            }
            _ => Ok(WriteOut::Rows(inserted.len() as u64)),
        }
    }

    /// Column `i` of every row, in its column's type here.
    fn column(&self, import: &Import, i: usize, name: &str) -> Result<Column> {
        let relation = import.relation;
        let ty = self.types.of(relation, name);
        let refuse = |value: &Value| {
            Error::Config(format!(
                "{}: {relation}.{name} is of type {ty} here and cannot hold the imported value \
                 {value:?}; nothing of this import was written",
                self.at
            ))
        };
        let values = || import.rows.iter().map(|row| &row[i]);
        Ok(match ty {
            Type::INT8 => Column::Integers(each(values(), refuse, |v| integer(v.as_ref()))?),
            Type::FLOAT8 => Column::Reals(each(values(), refuse, |v| real(v.as_ref()))?),
            Type::TEXT => Column::Texts(each(values(), refuse, |v| match v {
                // As an append stores them: a number as its decimal text.
                Value::Integer(n) => Some(n.to_string()),
                Value::Real(x) => Some(x.to_string()),
                Value::Text(t) => Some(escape_text(t).into_owned()),
                Value::Blob(b) => std::str::from_utf8(b)
                    .ok()
                    .map(|t| escape_text(t).into_owned()),
                Value::Null => None,
            })?),
            other => {
                return Err(Error::Config(format!(
                    "{}: {relation}.{name} is of type {other}, which an import does not write",
                    self.at
                )))
            }
        })
    }

    /// Refuses messages of a session this database does not have.
    async fn check_sessions_exist(&self, client: &Client, import: &Import) -> Result<()> {
        let sessions: Vec<String> = import
            .message_sessions()
            .iter()
            .map(|s| escape_text(s).into_owned())
            .collect();
        let missing = client
            .query_typed(
                "SELECT s FROM unnest($1::text[]) AS s
                 WHERE NOT EXISTS (SELECT 1 FROM sessions WHERE id = s) ORDER BY s",
                &[(&sessions, Type::TEXT_ARRAY)],
            )
            .await
            .map_err(|e| classify(&self.at, e))?;
        if missing.is_empty() {
            return Ok(());
        }
        let missing: Vec<String> = missing
            .iter()
            .map(|r| unescape_text(r.get(0)).into_owned())
            .collect();
        Err(import.orphans(&self.at, &missing))
    }

    /// Moves the message id sequence past the imported ids. Taking the
    /// table's lock first keeps every other writer's next id from being
    /// drawn meanwhile, so the sequence only ever moves forward.
    async fn move_ids_past(&self, client: &Client, import: &Import) -> Result<()> {
        let Some(&highest) = import.message_ids().iter().max() else {
            return Ok(());
        };
        let fail = |e| classify(&self.at, e);
        let behind: bool = client
            .query_typed(
                "SELECT COALESCE(pg_sequence_last_value(
                     pg_get_serial_sequence('messages', 'id')::regclass), 0) < $1",
                &[(&highest, Type::INT8)],
            )
            .await
            .map_err(fail)?[0]
            .get(0);
        if behind {
            client
                .batch_execute("LOCK TABLE messages IN SHARE ROW EXCLUSIVE MODE")
                .await
                .map_err(fail)?;
            client
                .query_typed(
                    "SELECT setval(pg_get_serial_sequence('messages', 'id'), GREATEST($1,
                         COALESCE(pg_sequence_last_value(
                             pg_get_serial_sequence('messages', 'id')::regclass), 0)))",
                    &[(&highest, Type::INT8)],
                )
                .await
                .map_err(fail)?;
        }
        Ok(())
    }

    /// Every imported message id not in `inserted` must be the same
    /// message here: of the same session.
    async fn check_same_messages(
        &self,
        client: &Client,
        import: &Import,
        inserted: &[i64],
    ) -> Result<()> {
        let message_ids = import.message_ids();
        let sessions = import.texts("session_id");
        let skipped: Vec<i64> = message_ids
            .iter()
            .copied()
            .filter(|id| inserted.binary_search(id).is_err())
            .collect();
        if skipped.is_empty() {
            return Ok(());
        }
        let here = client
            .query_typed(
                "SELECT id, session_id FROM messages WHERE id = ANY($1)",
                &[(&skipped, Type::INT8_ARRAY)],
            )
            .await
            .map_err(|e| classify(&self.at, e))?;
        for row in here {
            let (id, theirs): (i64, &str) = (row.get(0), row.get(1));
            let theirs = unescape_text(theirs);
            let ours = message_ids
                .iter()
                .position(|&m| m == id)
                .and_then(|n| sessions[n])
                .unwrap_or_default();
            if theirs != ours {
                return Err(import.collision(&self.at, id, ours, &theirs));
            }
        }
        Ok(())
    }

    /// Gives each imported session without a parent here the parent it has
    /// in `import`, once that parent is here.
    async fn link_parents(&self, client: &Client, import: &Import, parent: usize) -> Result<()> {
        let (ids, parents): (Vec<String>, Vec<String>) = import
            .texts("id")
            .into_iter()
            .zip(&import.rows)
            .filter_map(|(id, row)| match (id, &row[parent]) {
                (Some(id), Value::Text(p)) => {
                    Some((escape_text(id).into_owned(), escape_text(p).into_owned()))
                }
                _ => None,
            })
            .unzip();
        if ids.is_empty() {
            return Ok(());
        }
        client
            .query_typed(
                "UPDATE sessions AS s SET parent_session_id = v.p
                 FROM unnest($1::text[], $2::text[]) AS v(id, p)
                 WHERE s.id = v.id AND s.parent_session_id IS NULL
                   AND EXISTS (SELECT 1 FROM sessions AS q WHERE q.id = v.p)",
                &[(&ids, Type::TEXT_ARRAY), (&parents, Type::TEXT_ARRAY)],
            )
            .await
            .map_err(|e| classify(&self.at, e))?;
        Ok(())
    }
}
