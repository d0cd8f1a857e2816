//! Commits by other hosts, told from ours: every write transaction takes
//! the next value of the database's `hermes_commits` sequence; a look reads
//! the sequence's last value, and any value since the previous look that
//! this backend did not take was taken by someone else. Exact without
//! LISTEN/NOTIFY (so behind PgBouncer too); a transaction elsewhere that
//! took a value and rolled back counts as a commit, which only costs the
//! guard a reload.

use std::collections::BTreeSet;
use std::sync::Mutex;

use super::connection::{Link, Server};
use super::error::classify;
use crate::error::Result;
use crate::store::lock;

pub struct Changes {
    state: Mutex<State>,
}

struct State {
    /// The sequence's last value at the previous look.
    seen: i64,
    /// Values our transactions took since then.
    ours: BTreeSet<i64>,
}

/// The counter's current value (0 before any write).
const LAST: &str = "SELECT CASE WHEN is_called THEN last_value ELSE 0 END FROM hermes_commits";

/// Taken at the start of each write transaction (an expression of its
/// first `SELECT`): its value.
pub const TAKE: &str = "nextval('hermes_commits')";

impl Changes {
    pub fn start(server: &Server, link: &mut Link) -> Result<Self> {
        let seen = last(server, link)?;
        Ok(Changes {
            state: Mutex::new(State {
                seen,
                ours: BTreeSet::new(),
            }),
        })
    }

    /// Records a value one of our transactions took.
    pub fn took(&self, value: i64) {
        lock(&self.state).ours.insert(value);
    }

    pub fn foreign_since_last_look(&self, server: &Server, link: &mut Link) -> Result<bool> {
        let now = last(server, link)?;
        let mut state = lock(&self.state);
        let ours_between = state.ours.range(state.seen + 1..=now).count() as i64;
        let foreign = now - state.seen > ours_between;
        state.seen = state.seen.max(now);
        state.ours = state.ours.split_off(&(now + 1));
        Ok(foreign)
    }
}

fn last(server: &Server, link: &mut Link) -> Result<i64> {
    server
        .block_on(link.client.query_typed(LAST, &[]))
        .map(|rows| rows[0].get(0))
        .map_err(|e| classify(&server.at, e))
}
