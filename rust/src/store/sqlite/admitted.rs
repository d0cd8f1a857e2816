//! A set of message ids holding at least those a search's source filter
//! admits, which the ranked query tests each match against, in SQL, as
//! `hermes_admitted(id)`.
//!
//! A word common to most messages matches hundreds of thousands of rows.
//! Ranking them all and then joining each with its session to test the
//! source (what the plain query does) costs a bm25 score and two row reads
//! per match; testing a match against the set (built from the index of
//! messages by session: `search.rs::admitted_set`) costs a bit, so only the
//! matches in it are ranked, and only the best of those are read to test
//! the filters.

use std::cell::RefCell;

use rusqlite::functions::FunctionFlags;
use rusqlite::Connection;

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
    /// The ids of the inclusive ranges `ranges` (in any order, overlaps
    /// allowed; a range whose end is before its start holds nothing).
    pub fn from_ranges(ranges: &[(i64, i64)]) -> IdSet {
        let ranges: Vec<(i64, i64)> = ranges.iter().copied().filter(|(a, b)| a <= b).collect();
        let (Some(first), Some(last)) = (
            ranges.iter().map(|r| r.0).min(),
            ranges.iter().map(|r| r.1).max(),
        ) else {
            return IdSet::default();
        };
        let span = usize::try_from(last - first).unwrap_or(0) + 1;
        let mut bits = vec![0u64; span.div_ceil(64)];
        for (a, b) in ranges {
            let (a, b) = ((a - first) as usize, (b - first) as usize);
            // Whole words at once: a session's run is hundreds of ids.
            let (wa, wb) = (a / 64, b / 64);
            let head = u64::MAX << (a % 64);
            let tail = u64::MAX >> (63 - b % 64);
            if wa == wb {
                bits[wa] |= head & tail;
            } else {
                bits[wa] |= head;
                bits[wa + 1..wb].fill(u64::MAX);
                bits[wb] |= tail;
            }
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
    fn a_set_holds_exactly_the_ids_of_its_ranges() {
        let ranges = [(70, 70), (5, 6), (64, 64), (100, 300), (250, 260), (9, 8)];
        let set = IdSet::from_ranges(&ranges);
        let held = |id: i64| ranges.iter().any(|&(a, b)| a <= id && id <= b);
        for id in (-2..400).chain([i64::MIN, i64::MAX]) {
            assert_eq!(set.contains(id), held(id), "{id}");
        }
        assert!(!IdSet::from_ranges(&[]).contains(0));
        assert!(!IdSet::from_ranges(&[(3, 2)]).contains(2));
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
        with_set(IdSet::from_ranges(&[(3, 3)]), || {
            assert!(ask(3));
            assert!(!ask(4));
        });
        assert!(!ask(3), "the set is gone when with_set returns");
    }
}
