//! A group-committed batch on the writer connection: the batch policy of
//! `store/batch.rs` with PostgreSQL's part, one attempt in one transaction.
//! The transaction's first round trip begins it, sets its durability
//! (`synchronous_commit` on for FULL, off for NORMAL) and how long it waits
//! for a lock another connection holds (`lock_timeout`: what is left of the
//! busy budget, so another host's long transaction fails the write within
//! the budget instead of holding it forever; both local to the transaction,
//! so a pooled server connection is left as it was) and takes the commit
//! counter's next value; then the sessions the batch appends to are locked
//! in id order, so two hosts committing batches over the same conversations
//! wait for each other instead of deadlocking. A batch of
//! appends only (the flushes of many conversations) is one statement
//! (`write.rs`: one call of the `hermes_append` function, which takes the
//! locks itself), so K conversations cost one round trip, not K; it goes
//! out pipelined with `BEGIN`, so a flush is two round trips with the
//! `COMMIT`. (The `COMMIT` waits for the statement's answer: an append
//! to a missing session fails the attempt, which is tried again without it,
//! and the transaction id must be in hand before a commit can be lost.)
//!
//! A `COMMIT` whose answer never comes (the server went away meanwhile) may
//! or may not have committed: retrying it blindly could write a turn twice.
//! The first round trip also reads the transaction's id, and such a commit
//! is settled by asking the server, once it answers again, what became of
//! that transaction (`pg_xact_status`): committed, the batch is done;
//! aborted, it is retried like any failed attempt.

use std::sync::atomic::Ordering;
use std::sync::TryLockError;
use std::time::Instant;

use futures_util::future::join3;
use tokio_postgres::types::Type;
use tokio_postgres::{Client, SimpleQueryMessage};

use super::changes::TAKE;
use super::connection::Link;
use super::error::classify;
use super::search_index;
use super::value::escape_text;
use super::write::Appended;
use super::PgBackend;
use crate::error::{Error, Result, StorageKind};
use crate::store::backoff::Backoff;
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
            deadline,
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
    deadline: Instant,
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
        let lock_wait = LockWait::until(self.deadline);
        let out = backend.server.block_on(backend.try_commit(
            client,
            jobs,
            active,
            self.patience,
            lock_wait,
            true,
        ));
        match out {
            Ok(Committed::Yes(outs)) => Ok(outs),
            Ok(Committed::Unknown { xid, outs, lost }) => {
                match backend.settle(&xid, self.writer, self.deadline) {
                    Ok(true) => Ok(outs),
                    Ok(false) => Err(Failure::Batch(lost)),
                    Err(e) => Err(Failure::Batch(e)),
                }
            }
            Err(failure) => {
                if !client.is_closed() {
                    let _ = backend.server.block_on(client.batch_execute("ROLLBACK"));
                }
                Err(failure)
            }
        }
    }
}

/// How long an attempt's statements wait for a lock: what is left of the
/// busy budget, at least a millisecond (PostgreSQL reads 0 as "forever").
#[derive(Clone, Copy)]
struct LockWait(u128);

impl LockWait {
    fn until(deadline: Instant) -> Self {
        LockWait(
            deadline
                .saturating_duration_since(Instant::now())
                .as_millis()
                .max(1),
        )
    }
}

/// How an attempt's `COMMIT` ended.
enum Committed {
    Yes(Vec<WriteOut>),
    /// The connection was lost before the server answered the `COMMIT`.
    Unknown {
        xid: String,
        outs: Vec<WriteOut>,
        lost: Error,
    },
}

impl PgBackend {
    /// Whether transaction `xid`, whose `COMMIT` got no answer, committed:
    /// asked on a new writer connection (kept in `writer`), reconnecting with
    /// backoff until `deadline`. Past it the outcome is still unknown, which
    /// is an error of its own: retrying could write the batch twice.
    fn settle(&self, xid: &str, writer: &mut Option<Link>, deadline: Instant) -> Result<bool> {
        let mut backoff = Backoff::default();
        loop {
            let asked = self.server.connect().and_then(|link| {
                let status = self
                    .server
                    .block_on(link.client.query_typed(
                        "SELECT pg_xact_status($1::text::xid8)",
                        &[(&xid, Type::TEXT)],
                    ))
                    .map(|rows| rows[0].get::<_, Option<String>>(0))
                    .map_err(|e| classify(&self.at, e));
                *writer = Some(link);
                status
            });
            match asked {
                Ok(status) => match status.as_deref() {
                    Some("committed") => return Ok(true),
                    // Rolled back, or (NULL) never committed: a transaction too
                    // old to know is not one whose answer was lost a moment ago.
                    Some("aborted") | None => return Ok(false),
                    // "in progress": the old connection's server process is
                    // still finishing it.
                    Some(_) => {}
                },
                Err(e) if !e.is_busy() => return Err(e),
                Err(_) => {}
            }
            if Instant::now() >= deadline {
                return Err(Error::Storage {
                    kind: StorageKind::Other,
                    at: self.at.clone(),
                    detail: format!(
                        "the server went away while committing transaction {xid} and did not \
                         say within the busy budget whether it committed; check the session's \
                         last messages before writing them again"
                    ),
                });
            }
            backoff.sleep();
        }
    }
}

impl PgBackend {
    async fn try_commit(
        &self,
        client: &Client,
        jobs: &[WriteOp],
        active: &[usize],
        patience: Patience,
        lock_wait: LockWait,
        together: bool,
    ) -> std::result::Result<Committed, Failure> {
        let batch = |e| Failure::Batch(classify(&self.at, e));
        let sync = match self.options.durability {
            Durability::Full => "on",
            Durability::Normal => "off",
        };
        let lock_ms = lock_wait.0;
        // `set_config(.., true)` is `SET LOCAL`, here in the one `SELECT`.
        let begin = format!(
            "BEGIN; SELECT {TAKE}, pg_current_xact_id()::text, \
             set_config('synchronous_commit', '{sync}', true), \
             set_config('lock_timeout', '{lock_ms}', true)"
        );
        let appends: Option<Vec<Appended>> = active
            .iter()
            .map(|&i| plain_append(&jobs[i]))
            .collect::<Option<_>>()
            .filter(|_| together);
        // A batch of plain appends locks its sessions itself (`hermes_append`).
        let mut sessions = Vec::new();
        if appends.is_none() {
            for &i in active {
                appended_sessions(&jobs[i], &mut sessions);
            }
            sessions.sort_unstable();
            sessions.dedup();
        }
        // BEGIN, the session locks and a batch of plain appends go out at once
        // (pipelined: the server runs them in order, one round trip for all);
        // an earlier one's failure fails the later ones, and its own error is
        // the one reported.
        let (taken, locked, appended) = join3(
            client.simple_query(&begin),
            lock_sessions(client, &sessions, patience),
            async {
                match &appends {
                    Some(appends) => Some(self.append_rows(client, appends, patience).await),
                    None => None,
                }
            },
        )
        .await;
        let taken = taken.map_err(batch)?;
        let Some(row) = taken.iter().find_map(|m| match m {
            SimpleQueryMessage::Row(row) => Some(row),
            _ => None,
        }) else {
            return Err(Failure::Batch(Error::Storage {
                kind: StorageKind::Other,
                at: self.at.clone(),
                detail: "the server answered BEGIN without the transaction's row".into(),
            }));
        };
        if let Some(value) = row.get(0).and_then(|v| v.parse().ok()) {
            self.changes.took(value);
        }
        let xid = row.get(1).unwrap_or_default().to_owned();
        locked.map_err(batch)?;
        let outs = match appended {
            Some(Ok(ids)) => {
                let mut outs = Vec::with_capacity(active.len());
                for (&i, ids) in active.iter().zip(ids) {
                    outs.push(WriteOut::Ids(ids.map_err(|e| Failure::of_job(i, e))?));
                }
                outs
            }
            Some(Err(e)) if active.len() == 1 => return Err(Failure::of_job(active[0], e)),
            Some(Err(e)) if e.is_whole_batch_failure() => return Err(Failure::Batch(e)),
            // One statement does not say whose rows the server refused:
            // again, one append at a time, to find out.
            Some(Err(_)) => {
                client.batch_execute("ROLLBACK").await.map_err(batch)?;
                return Box::pin(self.try_commit(client, jobs, active, patience, lock_wait, false))
                    .await;
            }
            None => {
                let mut outs = Vec::with_capacity(active.len());
                for &i in active {
                    let out = self
                        .apply(client, &jobs[i])
                        .await
                        .map_err(|e| Failure::of_job(i, e))?;
                    outs.push(out);
                }
                outs
            }
        };
        match client.batch_execute("COMMIT").await {
            Ok(()) => Ok(Committed::Yes(outs)),
            // The server answered: a refused commit is rolled back.
            Err(e) if e.as_db_error().is_some() => Err(batch(e)),
            Err(e) => Ok(Committed::Unknown {
                xid,
                outs,
                lost: classify(&self.at, e),
            }),
        }
    }
}

/// Locks the rows of `sessions` in id order, so two writers never wait for
/// each other in a cycle, or fails at once under `Patience::Never`.
async fn lock_sessions(
    client: &Client,
    sessions: &[&str],
    patience: Patience,
) -> std::result::Result<(), tokio_postgres::Error> {
    if sessions.is_empty() {
        return Ok(());
    }
    let ids: Vec<String> = sessions
        .iter()
        .map(|s| escape_text(s).into_owned())
        .collect();
    let wait = match patience {
        Patience::Budget => "",
        Patience::Never => " NOWAIT",
    };
    let sql = format!("SELECT 1 FROM sessions WHERE id = ANY($1) ORDER BY id FOR UPDATE{wait}");
    client
        .query_typed(&sql, &[(&ids, Type::TEXT_ARRAY)])
        .await
        .map(drop)
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

/// `op` as an append that can share the batch's one statement: a plain append
/// (one with a `once_key` first checks its key).
fn plain_append(op: &WriteOp) -> Option<Appended<'_>> {
    match op {
        WriteOp::Append {
            session_id,
            rows,
            once_key: None,
        } => Some(Appended { session_id, rows }),
        _ => None,
    }
}
