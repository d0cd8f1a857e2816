//! The SQL of each write, inside the batch's open transaction. Appends are
//! one statement however many conversations a batch carries: every
//! session's counters moved and every row inserted (from arrays, one per
//! column) in one round trip.

use std::borrow::Cow;
use std::collections::BTreeMap;

use tokio_postgres::types::{ToSql, Type};
use tokio_postgres::Client;

use super::error::classify;
use super::search_index;
use super::sql::Sql;
use super::value::escape_text;
use super::PgBackend;
use crate::error::{Error, Result};
use crate::model::{NewMessage, Value};
use crate::store::batch::Patience;
use crate::store::columns::Use;
use crate::store::{Delete, Insert, NoMatch, Relation, Update, WriteOp, WriteOut};

/// The migration that adds `hermes_append`, the appends of a batch in one
/// call: `$1`-`$3` the sessions (each once) with what their counters grow
/// by, `$4`-`$21` the rows (one array per column) with their session; a row
/// whose session is missing joins nothing and is not written. A function, so
/// that the server plans the statement once per connection (PL/pgSQL keeps
/// its plans) where an unnamed statement is parsed and planned again on every
/// flush, most of a small flush's time on the server; it works behind
/// PgBouncer in transaction mode, where a named prepared statement does not.
/// The sessions are locked in id order first when there are several (two
/// hosts' batches then wait for each other instead of deadlocking), or
/// without waiting when `$22` says so; one session's lock is its `UPDATE`'s.
pub const SCHEMA: &str = "
CREATE OR REPLACE FUNCTION hermes_append(text[], bigint[], bigint[], text[], text[], text[], text[], text[],
    text[], text[], double precision[], bigint[], text[], text[], text[], text[], text[], text[],
    text[], bigint[], text[], boolean)
RETURNS TABLE (message_id bigint, message_session text) LANGUAGE plpgsql AS $$
BEGIN
    IF $22 THEN
        PERFORM 1 FROM sessions WHERE id = ANY($1) ORDER BY id FOR UPDATE NOWAIT;
    ELSIF cardinality($1) > 1 THEN
        PERFORM 1 FROM sessions WHERE id = ANY($1) ORDER BY id FOR UPDATE;
    END IF;
    RETURN QUERY
    WITH c AS (SELECT * FROM unnest($1, $2, $3) AS c(id, k, t)),
    s AS (
        UPDATE sessions SET message_count = COALESCE(message_count, 0) + c.k,
            tool_call_count = COALESCE(tool_call_count, 0) + c.t,
            ended_at = NULL, end_reason = NULL
        FROM c WHERE sessions.id = c.id RETURNING sessions.id),
    inserted AS (
        INSERT INTO messages (session_id, role, content, tool_call_id, tool_calls, tool_name,
            effect_disposition, timestamp, token_count, finish_reason, reasoning,
            reasoning_content, reasoning_details, codex_reasoning_items, codex_message_items,
            platform_message_id, observed, active, api_content)
        SELECT s.id, r.role, r.content, r.tool_call_id, r.tool_calls, r.tool_name,
            r.effect_disposition, r.timestamp, r.token_count, r.finish_reason, r.reasoning,
            r.reasoning_content, r.reasoning_details, r.codex_reasoning_items,
            r.codex_message_items, r.platform_message_id, r.observed, 1, r.api_content
        FROM unnest($4, $5, $6, $7, $8, $9, $10, $11, $12, $13, $14, $15, $16, $17, $18, $19,
                $20, $21)
            WITH ORDINALITY AS r(session_id, role, content, tool_call_id, tool_calls, tool_name,
                effect_disposition, timestamp, token_count, finish_reason, reasoning,
                reasoning_content, reasoning_details, codex_reasoning_items,
                codex_message_items, platform_message_id, observed, api_content, n)
        JOIN s ON s.id = r.session_id
        ORDER BY r.n
        RETURNING messages.id, messages.session_id)
    SELECT * FROM inserted;
END $$;
";

const APPEND: &str = "SELECT * FROM hermes_append($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, \
    $12, $13, $14, $15, $16, $17, $18, $19, $20, $21, $22)";

/// One append of a batch: a session and its new rows.
pub(super) struct Appended<'a> {
    pub session_id: &'a str,
    pub rows: &'a [NewMessage],
}

/// One text column of the rows of every append, escaped.
fn texts<'a>(
    appends: &[Appended<'a>],
    column: impl Fn(&'a NewMessage) -> Option<&'a str>,
) -> Vec<Option<String>> {
    rows_of(appends)
        .map(|r| column(r).map(|t| escape_text(t).into_owned()))
        .collect()
}

fn rows_of<'s, 'a: 's>(appends: &'s [Appended<'a>]) -> impl Iterator<Item = &'a NewMessage> + 's {
    appends.iter().flat_map(|a| a.rows.iter())
}

/// Content as text: SQLite would keep a number or bytes as they are;
/// here a number is its decimal text and bytes their UTF-8 reading.
fn content_text(content: &Value) -> Option<String> {
    match content {
        Value::Null => None,
        Value::Text(t) => Some(escape_text(t).into_owned()),
        Value::Integer(n) => Some(n.to_string()),
        Value::Real(x) => Some(x.to_string()),
        Value::Blob(b) => Some(escape_text(&String::from_utf8_lossy(b)).into_owned()),
    }
}

impl PgBackend {
    pub(super) async fn apply(&self, client: &Client, op: &WriteOp) -> Result<WriteOut> {
        match op {
            WriteOp::Append {
                session_id,
                rows,
                once_key,
            } => {
                if let Some(key) = once_key {
                    if !self.first_time(client, key).await? {
                        return Ok(WriteOut::Ids(Vec::new()));
                    }
                }
                let append = Appended { session_id, rows };
                let mut ids = self
                    .append_rows(client, &[append], Patience::Budget)
                    .await?;
                ids.pop()
                    .unwrap_or_else(|| Ok(Vec::new()))
                    .map(WriteOut::Ids)
            }
            WriteOp::Insert(insert) => self.insert(client, insert).await,
            WriteOp::Update(update) => self.update(client, update).await,
            WriteOp::Delete(delete) => self.delete(client, delete).await,
            WriteOp::SearchIndex(upkeep) => search_index::upkeep(client, *upkeep)
                .await
                .map(WriteOut::Rows)
                .map_err(|e| classify(&self.at, e)),
            WriteOp::Import(import) => self.import(client, import).await,
            WriteOp::Transaction(ops) => {
                let mut outs = Vec::with_capacity(ops.len());
                for op in ops {
                    outs.push(Box::pin(self.apply(client, op)).await?);
                }
                Ok(WriteOut::Many(outs))
            }
        }
    }

    /// Records `key` in `state_meta`; false if it was there already.
    async fn first_time(&self, client: &Client, key: &str) -> Result<bool> {
        let now = crate::model::now().to_string();
        let rows = client
            .query_typed(
                "INSERT INTO state_meta (key, value) VALUES ($1, $2)
                 ON CONFLICT (key) DO NOTHING RETURNING 1",
                &[(&escape_text(key), Type::TEXT), (&now, Type::TEXT)],
            )
            .await
            .map_err(|e| classify(&self.at, e))?;
        Ok(!rows.is_empty())
    }

    /// Every append in one statement; each append's ids (in order), or
    /// `SessionNotFound` for one whose session does not exist (nothing of it
    /// was written). A server error fails the statement, so all of them.
    /// Under `Patience::Never` a session another transaction holds fails it
    /// at once.
    pub(super) async fn append_rows(
        &self,
        client: &Client,
        appends: &[Appended<'_>],
        patience: Patience,
    ) -> Result<Vec<Result<Vec<i64>>>> {
        if rows_of(appends).next().is_none() {
            return Ok(appends.iter().map(|_| Ok(Vec::new())).collect());
        }
        let escaped: Vec<Cow<str>> = appends.iter().map(|a| escape_text(a.session_id)).collect();
        // Each session once, with its appends' counts summed.
        let mut grow: BTreeMap<&str, (i64, i64)> = BTreeMap::new();
        for (a, id) in appends.iter().zip(&escaped) {
            let g = grow.entry(id).or_default();
            g.0 += a.rows.len() as i64;
            g.1 += a.rows.iter().map(|r| r.tool_call_count).sum::<i64>();
        }
        let ids: Vec<&str> = grow.keys().copied().collect();
        let counts: Vec<i64> = grow.values().map(|g| g.0).collect();
        let calls: Vec<i64> = grow.values().map(|g| g.1).collect();
        let session: Vec<&str> = appends
            .iter()
            .zip(&escaped)
            .flat_map(|(a, id)| std::iter::repeat_n(id.as_ref(), a.rows.len()))
            .collect();
        let role = texts(appends, |r| Some(&r.role));
        let content: Vec<Option<String>> =
            rows_of(appends).map(|r| content_text(&r.content)).collect();
        let tool_call_id = texts(appends, |r| r.tool_call_id.as_deref());
        let tool_calls_json = texts(appends, |r| r.tool_calls.as_deref());
        let tool_name = texts(appends, |r| r.tool_name.as_deref());
        let effect = texts(appends, |r| r.effect_disposition.as_deref());
        let timestamp: Vec<f64> = rows_of(appends).map(|r| r.timestamp).collect();
        let token_count: Vec<Option<i64>> = rows_of(appends).map(|r| r.token_count).collect();
        let finish = texts(appends, |r| r.finish_reason.as_deref());
        let reasoning = texts(appends, |r| r.reasoning.as_deref());
        let reasoning_content = texts(appends, |r| r.reasoning_content.as_deref());
        let reasoning_details = texts(appends, |r| r.reasoning_details.as_deref());
        let codex_reasoning = texts(appends, |r| r.codex_reasoning_items.as_deref());
        let codex_message = texts(appends, |r| r.codex_message_items.as_deref());
        let platform = texts(appends, |r| r.platform_message_id.as_deref());
        let observed: Vec<i64> = rows_of(appends).map(|r| r.observed.into()).collect();
        let api_content = texts(appends, |r| r.api_content.as_deref());
        let nowait = patience == Patience::Never;
        let text = Type::TEXT_ARRAY;
        let params: [(&(dyn ToSql + Sync), Type); 22] = [
            (&ids, text.clone()),
            (&counts, Type::INT8_ARRAY),
            (&calls, Type::INT8_ARRAY),
            (&session, text.clone()),
            (&role, text.clone()),
            (&content, text.clone()),
            (&tool_call_id, text.clone()),
            (&tool_calls_json, text.clone()),
            (&tool_name, text.clone()),
            (&effect, text.clone()),
            (&timestamp, Type::FLOAT8_ARRAY),
            (&token_count, Type::INT8_ARRAY),
            (&finish, text.clone()),
            (&reasoning, text.clone()),
            (&reasoning_content, text.clone()),
            (&reasoning_details, text.clone()),
            (&codex_reasoning, text.clone()),
            (&codex_message, text.clone()),
            (&platform, text.clone()),
            (&observed, Type::INT8_ARRAY),
            (&api_content, text),
            (&nowait, Type::BOOL),
        ];
        let inserted = client
            .query_typed(APPEND, &params)
            .await
            .map_err(|e| classify(&self.at, e))?;
        // Each session's new ids in order, handed to its appends in batch order.
        let mut by_session: BTreeMap<&str, Vec<i64>> = BTreeMap::new();
        for row in &inserted {
            by_session.entry(row.get(1)).or_default().push(row.get(0));
        }
        by_session.values_mut().for_each(|ids| ids.sort_unstable());
        Ok(appends
            .iter()
            .zip(&escaped)
            .map(|(a, id)| {
                if a.rows.is_empty() {
                    return Ok(Vec::new());
                }
                match by_session.get_mut(id.as_ref()) {
                    Some(ids) => Ok(ids.drain(..a.rows.len().min(ids.len())).collect()),
                    None => Err(self.not_found(a.session_id)),
                }
            })
            .collect())
    }

    /// Runs `sql`, returning its rows.
    async fn run(&self, client: &Client, sql: &Sql<'_>) -> Result<Vec<tokio_postgres::Row>> {
        client
            .query_typed(&sql.text, &sql.params())
            .await
            .map_err(|e| classify(&self.at, e))
    }

    async fn insert(&self, client: &Client, insert: &Insert) -> Result<WriteOut> {
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
        let mut sql = Sql::insert(&self.types, insert);
        sql.text.push_str(" RETURNING 1");
        Ok(WriteOut::Rows(self.run(client, &sql).await?.len() as u64))
    }

    async fn update(&self, client: &Client, update: &Update) -> Result<WriteOut> {
        let relation = update.relation;
        let names = update.set.iter().map(|(c, _)| c.as_str());
        self.columns.check_all(relation, names, Use::Set)?;
        update.filter.check(relation, &self.columns)?;
        if update.set.is_empty() {
            return Ok(WriteOut::Rows(0));
        }
        let changed = if relation == Relation::Messages {
            let sql = Sql::update(&self.types, update, Some("session_id"));
            let rows = self.run(client, &sql).await?;
            if update.set.iter().any(|(c, _)| c == "active") {
                self.recount(client, &rows).await?;
            }
            rows.len()
        } else {
            let sql = Sql::update(&self.types, update, Some("1"));
            self.run(client, &sql).await?.len()
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

    async fn delete(&self, client: &Client, delete: &Delete) -> Result<WriteOut> {
        delete.filter.check(delete.relation, &self.columns)?;
        let returning = if delete.relation == Relation::Messages {
            "session_id"
        } else {
            "1"
        };
        let sql = Sql::delete(&self.types, delete, Some(returning));
        let rows = self.run(client, &sql).await?;
        if delete.relation == Relation::Messages {
            self.recount(client, &rows).await?;
        }
        Ok(WriteOut::Rows(rows.len() as u64))
    }

    /// Recounts `message_count` (the active rows) of the sessions of
    /// `rows` (each a changed message's `session_id`, as stored).
    async fn recount(&self, client: &Client, rows: &[tokio_postgres::Row]) -> Result<()> {
        if rows.is_empty() {
            return Ok(());
        }
        let mut sessions: Vec<String> = rows.iter().map(|r| r.get(0)).collect();
        sessions.sort_unstable();
        sessions.dedup();
        self.recount_sessions(client, &sessions).await
    }

    /// Sets the `message_count` of `sessions` (ids as stored) to their
    /// active rows.
    pub(super) async fn recount_sessions(
        &self,
        client: &Client,
        sessions: &[String],
    ) -> Result<()> {
        if sessions.is_empty() {
            return Ok(());
        }
        client
            .query_typed(
                "UPDATE sessions SET message_count = (SELECT COUNT(*) FROM messages
                 WHERE session_id = sessions.id AND active = 1)
                 WHERE id = ANY($1)",
                &[(&sessions, Type::TEXT_ARRAY)],
            )
            .await
            .map_err(|e| classify(&self.at, e))?;
        Ok(())
    }
}
