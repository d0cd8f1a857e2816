//! A group-committed batch on the writer connection: the batch policy of
//! `store/batch.rs` with PostgreSQL's part, one attempt in one transaction.
//! The transaction's first round trip begins it, sets its durability
//! (`synchronous_commit` on for FULL, off for NORMAL; `SET LOCAL`, so a
//! pooled server connection is left as it was) and takes the commit
//! counter's next value; then the sessions the batch appends to are locked
//! in id order, so two hosts committing batches over the same
//! conversations wait for each other instead of deadlocking.

use std::sync::atomic::Ordering;
use std::sync::TryLockError;
use std::time::Instant;

use tokio_postgres::types::Type;
use tokio_postgres::{Client, SimpleQueryMessage};

use super::changes::TAKE;
use super::connection::Link;
use super::error::classify;
use super::search_index;
use super::value::escape_text;
use super::PgBackend;
use crate::error::{Error, Result};
use crate::store::batch::{self, Failure, Patience, Transact};
use crate::store::{lock, Durability, WriteOp, WriteOut};

impl PgBackend {
    pub(super) fn commit_batch(
        &self,
        jobs: &[WriteOp],
        patience: Patience,
    ) -> Vec<Result<WriteOut>> {
        let all_fail = |e: Error| jobs.iter().map(|_| Err(e.clone())).collect();
        if let Err(e) = self.ensure_open() {
            return all_fail(e);
        }
        let mut writer = match patience {
            Patience::Budget => lock(&self.writer),
            Patience::Never => match self.writer.try_lock() {
                Ok(writer) => writer,
                Err(TryLockError::Poisoned(p)) => p.into_inner(),
                Err(TryLockError::WouldBlock) => return all_fail(self.writer_busy()),
            },
        };
        let deadline = match patience {
            Patience::Budget => Instant::now() + self.options.busy_budget,
            Patience::Never => Instant::now(),
        };
        let mut attempt = Attempt {
            backend: self,
            writer: &mut writer,
            patience,
        };
        let results = batch::commit(&mut attempt, jobs, deadline, patience, || {
            self.writer_busy()
        });
        drop(writer);
        self.own_appends.record(jobs, &results);
        let mut done = jobs.iter().zip(&results);
        if done.any(|(job, out)| out.is_ok() && search_index::leaves_pending(job)) {
            self.indexer.wake();
        }
        results
    }
}

struct Attempt<'a> {
    backend: &'a PgBackend,
    writer: &'a mut Option<Link>,
    patience: Patience,
}

impl Transact for Attempt<'_> {
    fn attempt(
        &mut self,
        jobs: &[WriteOp],
        active: &[usize],
    ) -> std::result::Result<Vec<WriteOut>, Failure> {
        let backend = self.backend;
        if backend.closed.load(Ordering::Acquire) {
            return Err(Failure::Batch(backend.closed_error()));
        }
        // A lost connection (server restarted, network cut) is replaced;
        // if that fails too, the attempt is retried with backoff.
        if self.writer.as_ref().is_none_or(|l| l.client.is_closed()) {
            *self.writer = Some(backend.server.connect().map_err(Failure::Batch)?);
        }
        let Some(link) = self.writer.as_ref() else {
            return Err(Failure::Batch(backend.closed_error()));
        };
        let client = &link.client;
        let out = backend
            .server
            .block_on(backend.try_commit(client, jobs, active, self.patience));
        if out.is_err() && !client.is_closed() {
            let _ = backend.server.block_on(client.batch_execute("ROLLBACK"));
        }
        out
    }
}

impl PgBackend {
    async fn try_commit(
        &self,
        client: &Client,
        jobs: &[WriteOp],
        active: &[usize],
        patience: Patience,
    ) -> std::result::Result<Vec<WriteOut>, Failure> {
        let batch = |e| Failure::Batch(classify(&self.at, e));
        let sync = match self.options.durability {
            Durability::Full => "on",
            Durability::Normal => "off",
        };
        let begin = format!("BEGIN; SET LOCAL synchronous_commit TO {sync}; {TAKE}");
        let taken = client.simple_query(&begin).await.map_err(batch)?;
        if let Some(value) = taken.iter().find_map(|m| match m {
            SimpleQueryMessage::Row(row) => row.get(0).and_then(|v| v.parse().ok()),
            _ => None,
        }) {
            self.changes.took(value);
        }
        let mut sessions = Vec::new();
        for &i in active {
            appended_sessions(&jobs[i], &mut sessions);
        }
        if !sessions.is_empty() {
            sessions.sort_unstable();
            sessions.dedup();
            let ids: Vec<String> = sessions
                .iter()
                .map(|s| escape_text(s).into_owned())
                .collect();
            let wait = match patience {
                Patience::Budget => "",
                Patience::Never => " NOWAIT",
            };
            let sql =
                format!("SELECT 1 FROM sessions WHERE id = ANY($1) ORDER BY id FOR UPDATE{wait}");
            client
                .query_typed(&sql, &[(&ids, Type::TEXT_ARRAY)])
                .await
                .map_err(batch)?;
        }
        let mut outs = Vec::with_capacity(active.len());
        for &i in active {
            let out = self
                .apply(client, &jobs[i])
                .await
                .map_err(|e| Failure::of_job(i, e))?;
            outs.push(out);
        }
        client.batch_execute("COMMIT").await.map_err(batch)?;
        Ok(outs)
    }
}

/// The sessions `op` adds messages to.
fn appended_sessions<'a>(op: &'a WriteOp, out: &mut Vec<&'a str>) {
    match op {
        WriteOp::Append { session_id, .. } => out.push(session_id),
        WriteOp::Import(import) => out.extend(import.message_sessions()),
        WriteOp::Transaction(ops) => ops.iter().for_each(|op| appended_sessions(op, out)),
        WriteOp::Insert(_) | WriteOp::Update(_) | WriteOp::Delete(_) | WriteOp::SearchIndex(_) => {}
    }
}
