//! What the indexer thread does at each step, once writes and transcript
//! loads are quiet: one chunk of pending rows into the search indexes, then
//! a WAL checkpoint if one is due.

use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};

use rusqlite::Connection;

use super::checkpoint::checkpoint;
use super::connection::Writer;
use super::error::note_short_read;
use super::search_index::{IndexPlan, BACKGROUND_CHUNK_ROWS};
use crate::store::indexer::{Step, INDEXER_PATIENCE, INDEXER_QUIET};
use crate::store::{lock, Durability, GroupCommit, WriteOp, WriteOut};

/// The indexer thread's share of the store.
pub struct Upkeep {
    pub writer: Arc<Mutex<Option<Writer>>>,
    pub commits: Arc<GroupCommit<WriteOp, WriteOut>>,
    pub cut: Arc<AtomicBool>,
    pub checkpoint_due: Arc<AtomicBool>,
    pub path: PathBuf,
    pub durability: Durability,
    /// The checkpoints' own connection, opened on the first one.
    pub checkpointer: Option<Connection>,
}

impl Upkeep {
    pub fn step(&mut self) -> Step {
        self.commits.wait_quiet(INDEXER_QUIET, INDEXER_PATIENCE);
        let step = {
            let mut writer = lock(&self.writer);
            // Past a cut the ranges stay pending (durable) for the next opener.
            let Some(w) = writer
                .as_mut()
                .filter(|_| !self.cut.load(Ordering::Acquire))
            else {
                return Step::Done;
            };
            let more = w
                .index_pending(i64::MAX, BACKGROUND_CHUNK_ROWS)
                .and_then(|more| Ok(more || w.index_stale(BACKGROUND_CHUNK_ROWS)?));
            match more {
                Ok(true) => Step::More,
                Ok(false) => Step::Done,
                Err(e) => {
                    note_short_read(&self.cut, &e);
                    return Step::Failed;
                }
            }
        };
        // Between chunks too: a writer faster than the indexer keeps it
        // from ever being done, and the WAL must not wait for that.
        if self.checkpoint_due.swap(false, Ordering::AcqRel) {
            let done = checkpoint(
                &mut self.checkpointer,
                &self.path,
                self.durability,
                &self.writer,
            );
            if let Err(e) = done {
                note_short_read(&self.cut, &e);
                self.checkpoint_due.store(true, Ordering::Release);
                return Step::Failed;
            }
        }
        step
    }
}

impl Writer {
    /// One indexer transaction: up to `chunk_rows` pending rows with ids up
    /// to `up_to` go into the search indexes. Returns whether more remain.
    ///
    /// Committed without fsync (`synchronous=NORMAL`): the index is derived
    /// data, and its pending range lives in the same transaction, so a
    /// commit lost to power failure takes the range's removal with it and
    /// the range is indexed again. A later durable write's fsync covers
    /// these WAL frames too.
    pub fn index_pending(&mut self, up_to: i64, chunk_rows: i64) -> rusqlite::Result<bool> {
        self.index_transaction(|index, conn| index.index_pending(conn, up_to, chunk_rows))
    }

    /// One indexer transaction of up to `chunk_rows` rows of the word-pair
    /// index's stale ones (`word_pairs.rs`). Returns whether more remain.
    pub fn index_stale(&mut self, chunk_rows: i64) -> rusqlite::Result<bool> {
        self.index_transaction(|index, conn| index.index_stale(conn, chunk_rows))
    }

    /// Runs `work` in an indexer transaction, as [`Writer::index_pending`]
    /// says, and returns what it returns.
    fn index_transaction(
        &mut self,
        work: impl FnOnce(&IndexPlan, &Connection) -> rusqlite::Result<bool>,
    ) -> rusqlite::Result<bool> {
        self.use_durability(Durability::Normal)?;
        let conn = &self.conn;
        conn.execute_batch("BEGIN IMMEDIATE")?;
        let done = self
            .index
            .refresh(conn)
            .and_then(|_| work(&self.index, conn))
            .and_then(|more| conn.execute_batch("COMMIT").map(|_| more));
        if done.is_err() && !conn.is_autocommit() {
            let _ = conn.execute_batch("ROLLBACK");
        }
        done
    }
}

#[cfg(test)]
mod tests {
    use super::super::test_support::*;
    use super::*;
    use crate::store::Backend;
    use rusqlite::Connection;
    use std::time::{Duration, Instant};

    #[test]
    fn a_write_leaves_a_pending_range_that_the_indexer_fills_right_after() {
        let dir = tempfile::tempdir().unwrap();
        let db = open(&dir);
        create(&db, "s");
        append(&db, "s", 3).unwrap();
        append(&db, "s", 2).unwrap();
        wait_until(|| indexed_rows(&db) == 5 && pending_rows(&db) == 0);
    }

    #[test]
    fn ranges_left_by_a_crashed_writer_are_indexed_at_the_next_open() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("state.db");
        open(&dir).close();
        let other = Connection::open(&path).unwrap();
        crashed_writer_rows(&other, "s", &["left behind", "also left"]);
        assert_eq!(count(&other, "SELECT COUNT(*) FROM messages_fts"), 0);
        let db = open(&dir);
        wait_until(|| pending_rows(&db) == 0);
        assert_eq!(count(&other, "SELECT COUNT(*) FROM messages_fts"), 2);
        assert_eq!(search_ids(&db, "left").len(), 2);
    }

    #[test]
    fn the_indexer_works_in_chunks() {
        let dir = tempfile::tempdir().unwrap();
        let db = open(&dir);
        db.indexer.stop();
        create(&db, "s");
        append(&db, "s", 1300).unwrap();
        let mut steps = Vec::new();
        loop {
            let more = lock(&db.writer)
                .as_mut()
                .unwrap()
                .index_pending(i64::MAX, BACKGROUND_CHUNK_ROWS)
                .unwrap();
            steps.push(indexed_rows(&db));
            if !more {
                break;
            }
        }
        assert_eq!(steps, vec![512, 1024, 1300]);
    }

    #[test]
    fn writes_are_durable_again_after_the_indexer_relaxed_synchronous() {
        let dir = tempfile::tempdir().unwrap();
        let db = open(&dir);
        db.indexer.stop();
        create(&db, "s");
        append(&db, "s", 1).unwrap();
        index_now(&db);
        let level = || {
            count(
                &lock(&db.writer).as_ref().unwrap().conn,
                "PRAGMA synchronous",
            )
        };
        assert_eq!(level(), 1, "the indexer commits at NORMAL");
        append(&db, "s", 1).unwrap();
        assert_eq!(level(), 2, "a write runs at FULL");
    }

    #[test]
    fn indexer_failures_are_retried_and_never_reach_writes() {
        let dir = tempfile::tempdir().unwrap();
        let db = open(&dir);
        create(&db, "s");
        let other = Connection::open(dir.path().join("state.db")).unwrap();
        crashed_writer_rows(&other, "s", &["waiting"]);
        other.execute_batch("BEGIN IMMEDIATE").unwrap();
        db.indexer.wake();
        std::thread::sleep(Duration::from_millis(300)); // its tries fail: busy
        assert_eq!(pending_rows(&db), 1, "a failed try lost the range");
        other.execute_batch("ROLLBACK").unwrap();
        // No write, no wake: the indexer tries again by itself.
        wait_until(|| pending_rows(&db) == 0);
        assert_eq!(count(&other, "SELECT COUNT(*) FROM messages_fts"), 1);
        append(&db, "s", 1).unwrap();
    }

    #[test]
    fn the_indexer_waits_while_a_transcript_loads() {
        let dir = tempfile::tempdir().unwrap();
        let db = open(&dir);
        create(&db, "s");
        append(&db, "s", 100).unwrap();
        wait_until(|| pending_rows(&db) == 0);
        // A row committed while a load (long enough for a helper thread) is
        // in progress stays pending until the load ends, unless the load
        // outlasts the indexer's patience; a late check proves nothing, so
        // it is tried again.
        let mut checked = 0;
        for _ in 0..5 {
            let mut pending_during_load = None;
            db.conversation("s", false, &mut |_first_table| {
                append(&db, "s", 1).unwrap();
                let committed = Instant::now();
                std::thread::sleep(INDEXER_QUIET * 5);
                let pending = pending_rows(&db);
                if committed.elapsed() < INDEXER_PATIENCE {
                    pending_during_load = Some(pending);
                }
                false
            })
            .unwrap();
            if let Some(pending) = pending_during_load {
                assert_eq!(pending, 1, "the indexer ran during the load");
                checked += 1;
            }
            wait_until(|| pending_rows(&db) == 0);
        }
        assert!(checked > 0, "no check within the indexer's patience");
    }

    #[test]
    fn the_indexers_commits_are_not_foreign() {
        let dir = tempfile::tempdir().unwrap();
        let db = open(&dir);
        create(&db, "s");
        let _ = db.foreign_commit_since_last_look().unwrap();
        append(&db, "s", 20).unwrap();
        wait_until(|| pending_rows(&db) == 0);
        assert!(!db.foreign_commit_since_last_look().unwrap());
        assert_eq!(db.own_appends("s"), 20);
        assert_eq!(db.live_message_count("s").unwrap(), Some(20));
    }

    #[test]
    fn past_a_cut_wal_the_indexer_writes_nothing() {
        let dir = tempfile::tempdir().unwrap();
        let db = open(&dir);
        create(&db, "s");
        // Pending rows whose pages the writer has cached: it could index
        // them without reading the cut WAL.
        append(&db, "s", 3).unwrap();
        let wal = dir.path().join("state.db-wal");
        {
            let _writer = lock(&db.writer); // the woken indexer waits behind the cut
            std::fs::File::options()
                .write(true)
                .open(&wal)
                .unwrap()
                .set_len(1000)
                .unwrap();
            lock(&db.readers).clear();
            assert!(db.messages("s", false).is_err(), "the hole went unnoticed");
        }
        assert!(db.index_pending_up_to(i64::MAX).is_err());
        std::thread::sleep(Duration::from_millis(50)); // the indexer's turn
        assert_eq!(
            std::fs::metadata(&wal).unwrap().len(),
            1000,
            "written past the cut"
        );
        db.close();
        let again = open(&dir);
        assert_eq!(integrity(&again), "ok");
    }
}
