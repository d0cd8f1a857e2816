//! Opening `state.db`, and the guards that keep the store from writing into
//! a file that is not (or no longer) the one it opened.

use std::fs::OpenOptions;
use std::io::Read;
use std::os::unix::fs::{MetadataExt, OpenOptionsExt};
use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};

use super::busy::with_busy_retry;
use super::connection::{self, Writer};
use super::error::At;
use super::search_index::IndexPlan;
use super::upkeep::Upkeep;
use super::{checkpoint, schema, SqliteBackend};
use crate::error::{Error, Result, StorageKind};
use crate::store::columns::Columns;
use crate::store::indexer::Indexer;
use crate::store::{GroupCommit, Location, Options, OwnAppends};

const SQLITE_MAGIC: &[u8; 16] = b"SQLite format 3\0";

/// The file's identity, to notice it being deleted or replaced underneath us
/// (SQLite would keep writing into the unlinked inode and lose every turn).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FileId {
    dev: u64,
    ino: u64,
}

impl FileId {
    fn of(path: &Path, at: &Location) -> Result<FileId> {
        let meta = std::fs::metadata(path).map_err(|source| Error::io(at, source))?;
        Ok(FileId {
            dev: meta.dev(),
            ino: meta.ino(),
        })
    }
}

impl SqliteBackend {
    /// Opens (creating if needed, mode 0600) the database at `path`.
    /// A file that is not a SQLite database is refused and never written.
    pub fn open(path: &Path, options: Options) -> Result<Self> {
        let path = path.to_path_buf();
        let at = Location::File(path.clone());
        if let Some(parent) = path.parent().filter(|p| !p.as_os_str().is_empty()) {
            std::fs::create_dir_all(parent).map_err(|source| Error::io(&at, source))?;
        }
        refuse_foreign_file(&path, &at)?;
        // Create the file ourselves so it is 0600 from its first byte; SQLite
        // gives the -wal and -shm files the same mode.
        OpenOptions::new()
            .create(true)
            .append(true)
            .mode(0o600)
            .open(&path)
            .map_err(|source| Error::io(&at, source))?;
        let file_id = FileId::of(&path, &at)?;
        // Switching a new file to WAL needs a moment of exclusive access: two
        // processes creating the file at once wait for each other like writers.
        let mut conn = with_busy_retry(&at, options.busy_budget, || {
            connection::connect(&path, options.durability)
        })?;
        with_busy_retry(&at, options.busy_budget, || {
            conn.execute_batch("BEGIN IMMEDIATE")?;
            let done = schema::ensure(&conn).and_then(|_| conn.execute_batch("COMMIT"));
            if done.is_err() && !conn.is_autocommit() {
                let _ = conn.execute_batch("ROLLBACK");
            }
            done
        })?;
        let columns = Columns::read(&at, |relation| {
            conn.prepare("SELECT name FROM pragma_table_info(?1)")
                .and_then(|mut s| s.query_map([relation.name()], |r| r.get(0))?.collect())
                .at(&at)
        })?;
        let data_version = connection::data_version(&conn).at(&at)?;
        // Ranges left by a process that crashed before indexing them, rows
        // other programs changed.
        let pending = conn
            .prepare("SELECT 1 FROM hermes_fts_pending UNION ALL SELECT 1 FROM hermes_fts_stale")
            .and_then(|mut s| s.exists([]))
            .at(&at)?;
        let checkpoint_due = Arc::new(AtomicBool::new(false));
        checkpoint::hook_wal(&mut conn, Arc::clone(&checkpoint_due)).at(&at)?;
        let writer = Arc::new(Mutex::new(Some(Writer {
            conn,
            data_version,
            index: IndexPlan::default(),
            durability: options.durability,
        })));
        let commits = Arc::new(GroupCommit::default());
        let cut = Arc::new(AtomicBool::new(false));
        let mut upkeep = Upkeep {
            writer: Arc::clone(&writer),
            commits: Arc::clone(&commits),
            cut: Arc::clone(&cut),
            checkpoint_due: Arc::clone(&checkpoint_due),
            path: path.clone(),
            durability: options.durability,
            checkpointer: None,
        };
        let indexer = Indexer::spawn(pending, move || upkeep.step())
            .map_err(|source| Error::io(&at, source))?;
        Ok(SqliteBackend {
            path,
            at,
            options,
            file_id,
            writer,
            readers: Mutex::new(Vec::new()),
            commits,
            indexer,
            columns,
            closed: AtomicBool::new(false),
            cut,
            checkpoint_due,
            own_appends: OwnAppends::default(),
        })
    }

    /// Refuses to write when the path no longer names the file we opened.
    pub(super) fn ensure_same_file(&self) -> Result<()> {
        match FileId::of(&self.path, &self.at) {
            Ok(id) if id == self.file_id => Ok(()),
            _ => Err(Error::Storage {
                kind: StorageKind::Other,
                at: self.at.clone(),
                detail: "the database file was deleted or replaced while open; nothing was written. Restore the file (or restart to start a new one) and retry".into(),
            }),
        }
    }

    /// Refuses to write once a read came up short (see `cut`).
    pub(super) fn ensure_not_cut(&self) -> Result<()> {
        if !self.cut.load(Ordering::Acquire) {
            return Ok(());
        }
        Err(Error::Storage {
            kind: StorageKind::Other,
            at: self.at.clone(),
            detail: "a read came up short: the file or its write-ahead log was cut while open, and a commit now would damage the database; nothing was written. Restart to recover the intact part, then retry".into(),
        })
    }
}

fn refuse_foreign_file(path: &Path, at: &Location) -> Result<()> {
    let mut header = [0u8; 16];
    let read = match std::fs::File::open(path) {
        Ok(mut f) => f.read(&mut header),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(()),
        Err(source) => return Err(Error::io(at, source)),
    };
    match read {
        Ok(0) => Ok(()),
        Ok(n) if n == 16 && &header == SQLITE_MAGIC => Ok(()),
        Ok(_) => Err(Error::NotADatabase { at: at.clone() }),
        Err(source) => Err(Error::io(at, source)),
    }
}

#[cfg(test)]
mod tests {
    use super::super::test_support::*;
    use super::*;
    use crate::store::Backend;
    use rusqlite::Connection;

    #[test]
    fn foreign_file_is_refused_and_untouched() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("state.db");
        std::fs::write(&path, b"not a database at all, just text").unwrap();
        let before = std::fs::read(&path).unwrap();
        let err = SqliteBackend::open(&path, Options::default())
            .err()
            .unwrap();
        assert!(matches!(err, Error::NotADatabase { .. }));
        assert_eq!(std::fs::read(&path).unwrap(), before);
        assert!(!dir.path().join("state.db-wal").exists());
    }

    #[test]
    fn files_are_private() {
        let dir = tempfile::tempdir().unwrap();
        let db = open(&dir);
        create(&db, "s");
        for name in ["state.db", "state.db-wal", "state.db-shm"] {
            let mode = std::fs::metadata(dir.path().join(name)).unwrap().mode() & 0o777;
            assert_eq!(mode, 0o600, "{name}");
        }
    }

    #[test]
    fn deleted_file_is_noticed() {
        let dir = tempfile::tempdir().unwrap();
        let db = open(&dir);
        create(&db, "s");
        std::fs::remove_file(dir.path().join("state.db")).unwrap();
        let err = append(&db, "s", 1).unwrap_err();
        assert!(err.to_string().contains("deleted or replaced"), "{err}");
    }

    #[test]
    fn a_deleted_or_replaced_file_still_reads_what_it_held_with_no_idle_reader() {
        let dir = tempfile::tempdir().unwrap();
        let db = open(&dir);
        create(&db, "s");
        append(&db, "s", 3).unwrap();
        std::fs::remove_file(dir.path().join("state.db")).unwrap();
        // No idle reader: the read must open one, and the path names nothing.
        crate::store::lock(&db.readers).clear();
        assert_eq!(rows_of(&db, "SELECT count(*) FROM messages"), 3);
        assert!(
            !dir.path().join("state.db").exists(),
            "a read recreated the file"
        );
        // Replaced by another database: still ours that is read.
        let other = Connection::open(dir.path().join("state.db")).unwrap();
        other
            .execute_batch("CREATE TABLE messages(id); INSERT INTO messages VALUES (1);")
            .unwrap();
        crate::store::lock(&db.readers).clear();
        assert_eq!(rows_of(&db, "SELECT count(*) FROM messages"), 3);
    }

    #[test]
    fn opening_waits_for_another_process_holding_the_new_file() {
        // Another opener of a brand-new file holds it exclusively for longer
        // than one busy wait (it is switching it to WAL and creating tables).
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("state.db");
        let other = Connection::open(&path).unwrap();
        other
            .execute_batch("CREATE TABLE t(x); BEGIN EXCLUSIVE; INSERT INTO t VALUES (1);")
            .unwrap();
        let holder = std::thread::spawn(move || {
            std::thread::sleep(std::time::Duration::from_millis(400));
            other.execute_batch("COMMIT").unwrap();
        });
        let db = open(&dir);
        holder.join().unwrap();
        create(&db, "s");
        assert_eq!(db.live_message_count("s").unwrap(), Some(0));
    }

    #[test]
    fn a_cut_wal_refuses_commits_and_the_database_stays_sound() {
        let dir = tempfile::tempdir().unwrap();
        let db = open(&dir);
        create(&db, "s");
        append(&db, "s", 3).unwrap();
        // Cut while idle: a commit between the cut and a read noticing it
        // (the indexer's, a few ms after the append) is not caught.
        index_now(&db);
        let wal = dir.path().join("state.db-wal");
        std::fs::File::options()
            .write(true)
            .open(&wal)
            .unwrap()
            .set_len(1000)
            .unwrap();
        // A new reader connection finds the hole...
        crate::store::lock(&db.readers).clear();
        assert!(db.messages("s", false).is_err());
        // ...and from then on nothing is committed after it.
        let err = append(&db, "s", 1).unwrap_err();
        assert!(err.to_string().contains("was cut while open"), "{err}");
        db.close();
        // What was only in the WAL is lost (the fault), but the file is sound.
        let again = open(&dir);
        assert_eq!(integrity(&again), "ok");
        create(&again, "t");
        append(&again, "t", 2).unwrap();
        assert_eq!(again.live_message_count("t").unwrap(), Some(2));
    }

    #[test]
    fn every_relation_has_its_columns_read_at_open() {
        let dir = tempfile::tempdir().unwrap();
        let db = open(&dir);
        for relation in crate::store::Relation::ALL {
            let names = db.columns().of(relation);
            for key in relation.key() {
                assert!(names.iter().any(|c| c == key), "{relation}: {names:?}");
            }
        }
    }
}
