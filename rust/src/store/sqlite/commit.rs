//! A group-committed batch on the writer connection: the batch policy of
//! `store/batch.rs`, with SQLite's part of it, one attempt in one
//! `BEGIN IMMEDIATE` transaction.

use std::sync::atomic::Ordering;
use std::sync::TryLockError;
use std::time::{Duration, Instant};

use rusqlite::Connection;

use super::connection::BUSY_TIMEOUT;
use super::error::{classify, note_short_read};
use super::search_index::IndexPlan;
use super::SqliteBackend;
use crate::error::{Error, Result};
use crate::store::batch::{self, Failure, Patience, Transact};
use crate::store::{lock, WriteOp, WriteOut};

impl SqliteBackend {
    /// Commits one batch, one result per job (see `store/batch.rs`).
    pub(super) fn commit_batch(
        &self,
        jobs: &[WriteOp],
        patience: Patience,
    ) -> Vec<Result<WriteOut>> {
        // A failure before the transaction: every job gets it.
        let all_fail = |e: Error| jobs.iter().map(|_| Err(e.clone())).collect();
        if let Err(e) = self
            .ensure_open()
            .and_then(|_| self.ensure_same_file())
            .and_then(|_| self.ensure_not_cut())
        {
            return all_fail(e);
        }
        let mut writer = match patience {
            Patience::Budget => lock(&self.writer),
            Patience::Never => match self.writer.try_lock() {
                Ok(writer) => writer,
                Err(TryLockError::Poisoned(p)) => p.into_inner(),
                // The indexer holds the writer connection for a chunk.
                Err(TryLockError::WouldBlock) => return all_fail(self.writer_busy()),
            },
        };
        let Some(w) = writer.as_mut() else {
            return all_fail(self.closed_error());
        };
        if let Err(e) = w.use_durability(self.options.durability) {
            return all_fail(classify(&self.at, e));
        }
        let never = patience == Patience::Never;
        let deadline = if never {
            // Not even SQLite's busy handler waits. Cannot fail: it only sets the handler.
            let _ = w.conn.busy_timeout(Duration::ZERO);
            Instant::now()
        } else {
            Instant::now() + self.options.busy_budget
        };
        let mut attempt = Attempt {
            backend: self,
            conn: &w.conn,
            index: &mut w.index,
            deferred_index: false,
        };
        let results = batch::commit(&mut attempt, jobs, deadline, patience, || {
            self.writer_busy()
        });
        let deferred_index = attempt.deferred_index;
        if never {
            let _ = w.conn.busy_timeout(BUSY_TIMEOUT);
        }
        drop(writer);
        if deferred_index || self.checkpoint_due.load(Ordering::Acquire) {
            self.indexer.wake();
        }
        self.own_appends.record(jobs, &results);
        results
    }
}

/// One batch's attempts on the writer connection.
struct Attempt<'a> {
    backend: &'a SqliteBackend,
    conn: &'a Connection,
    index: &'a mut IndexPlan,
    /// The committed attempt left its new messages to the indexer: wake it.
    deferred_index: bool,
}

impl Transact for Attempt<'_> {
    fn attempt(
        &mut self,
        jobs: &[WriteOp],
        active: &[usize],
    ) -> std::result::Result<Vec<WriteOut>, Failure> {
        let out = self.try_commit(jobs, active);
        if out.is_err() && !self.conn.is_autocommit() {
            let _ = self.conn.execute_batch("ROLLBACK");
        }
        out
    }
}

impl Attempt<'_> {
    /// The jobs at `active` in one transaction. The batch's new messages
    /// are left to the indexer as pending ranges, or indexed by the
    /// triggers.
    fn try_commit(
        &mut self,
        jobs: &[WriteOp],
        active: &[usize],
    ) -> std::result::Result<Vec<WriteOut>, Failure> {
        let (backend, conn) = (self.backend, self.conn);
        let batch = |e: rusqlite::Error| {
            note_short_read(&backend.cut, &e);
            Failure::Batch(classify(&backend.at, e))
        };
        conn.execute_batch("BEGIN IMMEDIATE").map_err(batch)?;
        self.index.refresh(conn).map_err(batch)?;
        let mut outs = Vec::with_capacity(active.len());
        let mut new_ids = Vec::new();
        for &i in active {
            let out = backend
                .apply(conn, self.index, &jobs[i])
                .map_err(|e| Failure::of_job(i, e))?;
            out.new_message_runs(&mut new_ids);
            outs.push(out);
        }
        // Each run holds only rows this transaction inserted: this
        // connection held the write lock while it inserted every one.
        let mut deferred = false;
        for (first, last) in new_ids {
            deferred |= self
                .index
                .index_new_rows(conn, first, last)
                .map_err(batch)?;
        }
        conn.execute_batch("COMMIT").map_err(batch)?;
        self.deferred_index = deferred;
        Ok(outs)
    }
}

#[cfg(test)]
mod tests {
    use super::super::test_support::*;
    use super::*;
    use crate::model::NewMessage;
    use crate::store::Backend;
    use std::sync::Arc;

    #[test]
    fn a_write_now_commits_when_nothing_else_writes() {
        let dir = tempfile::tempdir().unwrap();
        let db = open(&dir);
        create(&db, "s");
        assert!(matches!(append_now(&db, "s"), Ok(WriteOut::Ids(ids)) if ids.len() == 1));
        assert_eq!(db.live_message_count("s").unwrap(), Some(1));
    }

    #[test]
    fn a_write_now_fails_at_once_when_another_process_holds_the_write_lock() {
        let dir = tempfile::tempdir().unwrap();
        let db = open(&dir);
        create(&db, "s");
        let other = Connection::open(dir.path().join("state.db")).unwrap();
        other.execute_batch("BEGIN IMMEDIATE").unwrap();
        // SQLite's own busy handler would sleep its whole timeout (100 ms) on
        // every try; the fastest of a few tries is immune to a stalled host.
        let fastest = (0..3)
            .map(|_| {
                let started = Instant::now();
                let got = append_now(&db, "s");
                assert!(matches!(got, Err(Error::WriterBusy { .. })), "{got:?}");
                started.elapsed()
            })
            .min()
            .unwrap();
        assert!(fastest < Duration::from_millis(50), "it waited {fastest:?}");
        other.execute_batch("ROLLBACK").unwrap();
        assert_eq!(
            db.live_message_count("s").unwrap(),
            Some(0),
            "nothing written"
        );
        assert!(append_now(&db, "s").is_ok(), "free again: it writes");
    }

    #[test]
    fn a_write_now_fails_while_this_store_is_writing_or_indexing() {
        let dir = tempfile::tempdir().unwrap();
        let db = Arc::new(open(&dir));
        create(&db, "s");
        // The writer connection held (as the indexer holds it for a chunk).
        let held = lock(&db.writer);
        assert!(matches!(
            append_now(&db, "s"),
            Err(Error::WriterBusy { .. })
        ));
        drop(held);
        // A batch being committed by another thread.
        let (entered, release) = (
            Arc::new(std::sync::Barrier::new(2)),
            Arc::new(std::sync::Barrier::new(2)),
        );
        let leader = {
            let (db, entered, release) =
                (Arc::clone(&db), Arc::clone(&entered), Arc::clone(&release));
            std::thread::spawn(move || {
                db.commits.submit(set_meta("k", "v"), |_| {
                    entered.wait();
                    release.wait();
                    vec![Ok(WriteOut::Done)]
                })
            })
        };
        entered.wait();
        assert!(matches!(
            append_now(&db, "s"),
            Err(Error::WriterBusy { .. })
        ));
        release.wait();
        leader.join().unwrap().unwrap();
        assert_eq!(
            db.live_message_count("s").unwrap(),
            Some(0),
            "nothing written"
        );
    }

    #[test]
    fn a_failing_job_is_dropped_from_its_batch_alone() {
        let dir = tempfile::tempdir().unwrap();
        let db = open(&dir);
        create(&db, "a");
        create(&db, "b");
        let job = |sid: &str| WriteOp::Append {
            session_id: sid.into(),
            rows: vec![NewMessage::text("user", "x", 1.0)],
            once_key: None,
        };
        let results = db.commit_batch(&[job("a"), job("missing"), job("b")], Patience::Budget);
        assert!(matches!(results[0], Ok(WriteOut::Ids(ref ids)) if ids.len() == 1));
        assert!(matches!(results[1], Err(Error::SessionNotFound { .. })));
        assert!(matches!(results[2], Ok(WriteOut::Ids(ref ids)) if ids.len() == 1));
        assert_eq!(db.live_message_count("a").unwrap(), Some(1));
        assert_eq!(db.live_message_count("b").unwrap(), Some(1));
        index_now(&db);
        assert_eq!(indexed_rows(&db), 2);
        assert_eq!((db.own_appends("a"), db.own_appends("missing")), (1, 0));
    }

    #[test]
    fn a_failed_single_write_commits_none_of_its_work() {
        let dir = tempfile::tempdir().unwrap();
        let db = open(&dir);
        let op = || WriteOp::Append {
            session_id: "late".into(),
            rows: vec![NewMessage::text("user", "x", 1.0)],
            once_key: Some("k".into()),
        };
        assert!(matches!(db.write(op()), Err(Error::SessionNotFound { .. })));
        create(&db, "late");
        assert!(matches!(db.write(op()).unwrap(), WriteOut::Ids(ids) if ids.len() == 1));
    }

    #[test]
    fn once_key_writes_once() {
        let dir = tempfile::tempdir().unwrap();
        let db = open(&dir);
        create(&db, "s");
        let op = || WriteOp::Append {
            session_id: "s".into(),
            rows: vec![NewMessage::text("user", "x", 1.0)],
            once_key: Some("k".into()),
        };
        assert!(matches!(db.write(op()).unwrap(), WriteOut::Ids(ids) if ids.len() == 1));
        assert_eq!(db.write(op()).unwrap(), WriteOut::Ids(vec![]));
        assert_eq!(db.live_message_count("s").unwrap(), Some(1));
    }

    #[test]
    fn foreign_commits_are_seen_own_are_not() {
        let dir = tempfile::tempdir().unwrap();
        let a = open(&dir);
        let b = open(&dir);
        create(&a, "s");
        assert!(!a.foreign_commit_since_last_look().unwrap());
        let _ = b.foreign_commit_since_last_look().unwrap();
        append(&b, "s", 1).unwrap();
        assert!(a.foreign_commit_since_last_look().unwrap());
        assert!(!a.foreign_commit_since_last_look().unwrap());
        append(&a, "s", 2).unwrap();
        assert!(append(&a, "missing", 1).is_err());
        assert_eq!((a.own_appends("s"), b.own_appends("s")), (2, 1));
        assert_eq!(a.own_appends("missing"), 0);
        assert_eq!(a.live_message_count("s").unwrap(), Some(3));
    }
}
