//! The messages a search's source filter admits, as a set of ids that the
//! ranked query tests each match against, in SQL, as `hermes_admitted(id)`.
//!
//! A word common to most messages matches hundreds of thousands of rows.
//! Ranking them all and then joining each with its session to test the
//! source (what the plain query does) costs a bm25 score and two row reads
//! per match; reading the admitted ids from the index of messages by
//! session first (no message row is read) and testing a match against
//! them costs a bit, so only the matches a filter keeps are ranked.

use std::cell::RefCell;

use rusqlite::functions::FunctionFlags;
use rusqlite::{Connection, Params};

/// The SQL function's name.
pub const FUNCTION: &str = "hermes_admitted";

thread_local! {
    /// The set the query running on this thread tests against (one search
    /// at a time per thread: a connection's statements step on the thread
    /// that runs them).
    static CURRENT: RefCell<Option<IdSet>> = const { RefCell::new(None) };
}

/// A set of message ids, a bit per id from the smallest to the largest.
#[derive(Debug, Default)]
pub struct IdSet {
    first: i64,
    bits: Vec<u64>,
}

impl IdSet {
    pub fn from_ids(ids: &[i64]) -> IdSet {
        let (Some(&first), Some(&last)) = (ids.iter().min(), ids.iter().max()) else {
            return IdSet::default();
        };
        let span = usize::try_from(last - first).unwrap_or(0) + 1;
        let mut bits = vec![0u64; span.div_ceil(64)];
        for &id in ids {
            let at = (id - first) as usize;
            bits[at / 64] |= 1 << (at % 64);
        }
        IdSet { first, bits }
    }

    pub fn contains(&self, id: i64) -> bool {
        let Some(at) = id
            .checked_sub(self.first)
            .and_then(|d| usize::try_from(d).ok())
        else {
            return false;
        };
        self.bits
            .get(at / 64)
            .is_some_and(|word| word & (1 << (at % 64)) != 0)
    }

    /// The ids `sql` returns (its first column), with `params`.
    pub fn read(conn: &Connection, sql: &str, params: impl Params) -> rusqlite::Result<IdSet> {
        let mut stmt = conn.prepare_cached(sql)?;
        let ids = stmt
            .query_map(params, |row| row.get::<_, i64>(0))?
            .collect::<rusqlite::Result<Vec<i64>>>()?;
        Ok(IdSet::from_ids(&ids))
    }
}

/// Declares `hermes_admitted(id)` on `conn`: whether `id` is in the set the
/// running [`with_set`] holds (false outside one). Not for the schema or
/// triggers: its answer depends on the query running.
pub fn declare(conn: &Connection) -> rusqlite::Result<()> {
    conn.create_scalar_function(
        FUNCTION,
        1,
        FunctionFlags::SQLITE_UTF8 | FunctionFlags::SQLITE_DIRECTONLY,
        |ctx| {
            let id = ctx.get::<i64>(0)?;
            Ok(CURRENT.with(|set| set.borrow().as_ref().is_some_and(|s| s.contains(id))))
        },
    )
}

/// Runs `f` (which steps the statements that call `hermes_admitted`) with
/// `set` as the set they test against, on this thread.
pub fn with_set<T>(set: IdSet, f: impl FnOnce() -> T) -> T {
    struct Reset;
    impl Drop for Reset {
        fn drop(&mut self) {
            CURRENT.with(|current| current.borrow_mut().take());
        }
    }
    CURRENT.with(|current| *current.borrow_mut() = Some(set));
    let _reset = Reset;
    f()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_set_holds_exactly_its_ids() {
        let set = IdSet::from_ids(&[70, 5, 64, 6]);
        for id in [5, 6, 64, 70] {
            assert!(set.contains(id), "{id}");
        }
        for id in [i64::MIN, -1, 0, 4, 7, 63, 65, 69, 71, i64::MAX] {
            assert!(!set.contains(id), "{id}");
        }
        assert!(!IdSet::from_ids(&[]).contains(0));
    }

    #[test]
    fn the_function_tests_the_running_set_and_nothing_outside_it() {
        let conn = Connection::open_in_memory().unwrap();
        declare(&conn).unwrap();
        let ask = |id: i64| -> bool {
            conn.query_row("SELECT hermes_admitted(?1)", [id], |r| r.get(0))
                .unwrap()
        };
        assert!(!ask(3));
        with_set(IdSet::from_ids(&[3]), || {
            assert!(ask(3));
            assert!(!ask(4));
        });
        assert!(!ask(3), "the set is gone when with_set returns");
    }
}
