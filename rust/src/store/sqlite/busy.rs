//! Retrying what found the file locked by another connection.

use std::time::{Duration, Instant};

use super::error::At;
use crate::error::Result;
use crate::store::backoff::Backoff;
use crate::store::Location;

/// Runs `attempt` until it stops failing with busy/locked or `budget` runs
/// out, with a jittered, growing pause between tries (see [`Backoff`]).
pub fn with_busy_retry<T>(
    at: &Location,
    budget: Duration,
    mut attempt: impl FnMut() -> rusqlite::Result<T>,
) -> Result<T> {
    let deadline = Instant::now() + budget;
    let mut backoff = Backoff::default();
    loop {
        match attempt().at(at) {
            Err(e) if e.is_busy() && Instant::now() < deadline => backoff.sleep(),
            other => return other,
        }
    }
}
