//! WAL checkpoints, off the commit path.
//!
//! SQLite's auto-checkpoint runs inside whichever commit pushes the WAL past
//! its limit, so one flush in ~30 paid ~5 ms for it. The writer's WAL hook
//! (which replaces the auto-checkpoint) only flags a checkpoint as due; the
//! indexer thread takes it (`upkeep.rs`).

use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use rusqlite::Connection;

use super::connection::{self, Writer};
use crate::store::{lock, Durability};

/// WAL frames (pages) after which the background thread checkpoints, as
/// SQLite's own auto-checkpoint would inside the committing caller's call.
pub const CHECKPOINT_FRAMES: i32 = 1000;

/// Makes the writer's commits flag `due` once the WAL has grown past
/// [`CHECKPOINT_FRAMES`], instead of checkpointing themselves.
pub fn hook_wal(conn: &mut Connection, due: Arc<AtomicBool>) -> rusqlite::Result<()> {
    conn.wal_hook(Some(
        move |_: &mut rusqlite::hooks::Wal, frames: std::ffi::c_int| {
            if frames >= CHECKPOINT_FRAMES {
                due.store(true, Ordering::Release);
            }
            Ok(())
        },
    ))
}

/// Copies the WAL into the database file on the indexer's own connection
/// (opened on first use) without holding up writers (`PASSIVE`); then,
/// with this store's writer held, copies the frames committed meanwhile
/// and starts the WAL over (`RESTART`, which gives up rather than wait if
/// another process is reading it). Passive checkpoints alone never start
/// the WAL over under a steady writer: it grew without bound, and every
/// read then searched a longer WAL.
pub fn checkpoint(
    conn: &mut Option<Connection>,
    path: &Path,
    level: Durability,
    writer: &Mutex<Option<Writer>>,
) -> rusqlite::Result<()> {
    let conn = match conn {
        Some(conn) => conn,
        None => {
            let fresh = connection::connect(path, level)?;
            // RESTART runs with our writer held: never sleep on readers.
            fresh.busy_timeout(Duration::ZERO)?;
            conn.insert(fresh)
        }
    };
    conn.execute_batch("PRAGMA wal_checkpoint(PASSIVE)")?;
    let _writes_paused = lock(writer);
    conn.execute_batch("PRAGMA wal_checkpoint(RESTART)")
}

#[cfg(test)]
mod tests {
    use super::super::test_support::*;
    use super::super::SqliteBackend;
    use super::*;
    use crate::model::NewMessage;
    use std::time::Instant;

    /// Appends ~5 MB (well past `CHECKPOINT_FRAMES` pages) and returns the
    /// size of the database file (not its WAL) right after.
    fn append_megabytes(db: &SqliteBackend, dir: &tempfile::TempDir) -> u64 {
        create(db, "big");
        for _ in 0..10 {
            let rows = (0..500)
                .map(|_| NewMessage::text("user", &"x".repeat(1000), 1.0))
                .collect();
            append_rows(db, "big", rows);
        }
        std::fs::metadata(dir.path().join("state.db"))
            .unwrap()
            .len()
    }

    #[test]
    fn checkpoints_run_beside_commits_not_inside_them() {
        let dir = tempfile::tempdir().unwrap();
        let db = open(&dir);
        db.indexer.stop();
        let size = append_megabytes(&db, &dir);
        assert!(
            size < 1 << 20,
            "a commit checkpointed: the file is {size} bytes"
        );
        assert!(db.checkpoint_due.load(Ordering::Acquire));

        let dir = tempfile::tempdir().unwrap();
        let db = open(&dir);
        append_megabytes(&db, &dir);
        let deadline = Instant::now() + Duration::from_secs(10);
        while std::fs::metadata(dir.path().join("state.db"))
            .unwrap()
            .len()
            < 4 << 20
        {
            assert!(
                Instant::now() < deadline,
                "the background checkpoint never ran"
            );
            std::thread::sleep(Duration::from_millis(5));
        }
    }

    #[test]
    fn a_steady_writer_does_not_grow_the_wal_without_bound() {
        let dir = tempfile::tempdir().unwrap();
        let db = open(&dir);
        create(&db, "s");
        // One-row commits back to back: faster than the indexer, which used
        // to checkpoint only once it had caught up, so never.
        for _ in 0..6000 {
            append(&db, "s", 1).unwrap();
        }
        let wal = std::fs::metadata(dir.path().join("state.db-wal"))
            .unwrap()
            .len();
        let limit = 8 * CHECKPOINT_FRAMES as u64 * 4096;
        assert!(wal < limit, "the WAL grew to {wal} bytes (limit {limit})");
    }
}
