//! How a group-committed batch of writes is committed, whatever the backend:
//! every job in one transaction; a job that fails for its own reasons is
//! dropped and the batch retried at once without it (only that job gets
//! the error); a busy store is retried with backoff until the deadline.
//!
//! No savepoint per job: SQLite's FTS5 writes its pending index data out as
//! a new segment at every savepoint, so savepoints would cost a segment (and
//! merge work) per job. The backend provides one thing, [`Transact`]: run
//! these jobs in one transaction.

use std::time::Instant;

use super::backoff::Backoff;
use super::{WriteOp, WriteOut};
use crate::error::{Error, Result};

/// How long a batch may wait for the write lock.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Patience {
    /// Retry a busy store for up to its busy budget.
    Budget,
    /// Not at all: a write made from an event loop.
    Never,
}

/// Why an attempt at a batch failed.
#[derive(Debug)]
pub enum Failure {
    /// One job's own error (at this index into the batch): retry without it.
    Job(usize, Error),
    /// Busy, I/O, disk full...: the whole attempt failed.
    Batch(Error),
}

impl Failure {
    /// The failure of the job at `index` with `err`: its own, unless the
    /// error dooms any transaction.
    pub fn of_job(index: usize, err: Error) -> Self {
        if err.is_whole_batch_failure() {
            Failure::Batch(err)
        } else {
            Failure::Job(index, err)
        }
    }
}

/// One backend's way to run a batch.
pub trait Transact {
    /// Runs the jobs at `active` (indices into `jobs`, in order) in one
    /// transaction and commits it, returning one result per active job. On
    /// failure nothing of the attempt stays: the transaction is rolled back.
    fn attempt(
        &mut self,
        jobs: &[WriteOp],
        active: &[usize],
    ) -> std::result::Result<Vec<WriteOut>, Failure>;
}

/// Commits `jobs` through `tx` by the policy above: one result per job, in
/// order. Busy failures are retried until `deadline`; a write that may not
/// wait (`Patience::Never`) and finds the store busy gets `busy_now`.
pub fn commit(
    tx: &mut impl Transact,
    jobs: &[WriteOp],
    deadline: Instant,
    patience: Patience,
    busy_now: impl Fn() -> Error,
) -> Vec<Result<WriteOut>> {
    let mut results: Vec<Option<Result<WriteOut>>> = jobs.iter().map(|_| None).collect();
    let mut backoff = Backoff::default();
    loop {
        let active: Vec<usize> = (0..jobs.len()).filter(|&i| results[i].is_none()).collect();
        if active.is_empty() {
            break;
        }
        match tx.attempt(jobs, &active) {
            Ok(outs) => {
                for (i, out) in active.into_iter().zip(outs) {
                    results[i] = Some(Ok(out));
                }
                break;
            }
            Err(Failure::Job(i, e)) => results[i] = Some(Err(e)),
            Err(Failure::Batch(e)) => {
                if e.is_busy() && Instant::now() < deadline {
                    backoff.sleep();
                    continue;
                }
                let e = if e.is_busy() && patience == Patience::Never {
                    busy_now()
                } else {
                    e
                };
                for r in results.iter_mut().filter(|r| r.is_none()) {
                    *r = Some(Err(e.clone()));
                }
                break;
            }
        }
    }
    results.into_iter().flatten().collect()
}

#[cfg(test)]
mod tests {
    use super::super::test_support::{append, at};
    use super::*;
    use crate::error::StorageKind;
    use std::time::Duration;

    fn busy() -> Error {
        Error::Storage {
            kind: StorageKind::Locked,
            at: at(),
            detail: "busy".into(),
        }
    }

    /// Jobs that fail on their own (appends to "bad"), and a store busy for
    /// its first `busy_tries` attempts; records every attempt's jobs.
    struct Scripted {
        busy_tries: usize,
        attempts: Vec<Vec<usize>>,
    }

    impl Transact for Scripted {
        fn attempt(
            &mut self,
            jobs: &[WriteOp],
            active: &[usize],
        ) -> std::result::Result<Vec<WriteOut>, Failure> {
            self.attempts.push(active.to_vec());
            if self.attempts.len() <= self.busy_tries {
                return Err(Failure::Batch(busy()));
            }
            for &i in active {
                if let WriteOp::Append { session_id, .. } = &jobs[i] {
                    if session_id == "bad" {
                        let missing = Error::SessionNotFound {
                            session_id: session_id.clone(),
                            at: at(),
                        };
                        return Err(Failure::of_job(i, missing));
                    }
                }
            }
            Ok(active
                .iter()
                .map(|&i| WriteOut::Ids(vec![i as i64]))
                .collect())
        }
    }

    #[test]
    fn a_failing_job_is_dropped_and_the_rest_committed_without_it() {
        let mut tx = Scripted {
            busy_tries: 0,
            attempts: Vec::new(),
        };
        let jobs = [append("a"), append("bad"), append("b"), append("bad")];
        let far = Instant::now() + Duration::from_secs(60);
        let results = commit(&mut tx, &jobs, far, Patience::Budget, busy);
        assert!(matches!(results[0], Ok(WriteOut::Ids(ref ids)) if ids == &[0]));
        assert!(matches!(results[1], Err(Error::SessionNotFound { .. })));
        assert!(matches!(results[2], Ok(WriteOut::Ids(ref ids)) if ids == &[2]));
        assert!(matches!(results[3], Err(Error::SessionNotFound { .. })));
        assert_eq!(
            tx.attempts,
            vec![vec![0, 1, 2, 3], vec![0, 2, 3], vec![0, 2]]
        );
    }

    #[test]
    fn a_busy_store_is_retried_until_the_deadline_then_every_job_gets_the_error() {
        let mut tx = Scripted {
            busy_tries: 2,
            attempts: Vec::new(),
        };
        let jobs = [append("a")];
        let far = Instant::now() + Duration::from_secs(60);
        let results = commit(&mut tx, &jobs, far, Patience::Budget, busy);
        assert!(results[0].is_ok());
        assert_eq!(tx.attempts.len(), 3);

        let mut tx = Scripted {
            busy_tries: usize::MAX,
            attempts: Vec::new(),
        };
        let jobs = [append("a"), append("b")];
        let results = commit(&mut tx, &jobs, Instant::now(), Patience::Budget, busy);
        assert!(results
            .iter()
            .all(|r| r.as_ref().is_err_and(Error::is_busy)));
        assert_eq!(tx.attempts.len(), 1, "past the deadline: no retry");
    }

    #[test]
    fn a_write_that_may_not_wait_gets_the_writer_busy_error_at_once() {
        let mut tx = Scripted {
            busy_tries: usize::MAX,
            attempts: Vec::new(),
        };
        let results = commit(
            &mut tx,
            &[append("a")],
            Instant::now(),
            Patience::Never,
            || Error::WriterBusy { at: at() },
        );
        assert!(matches!(results[0], Err(Error::WriterBusy { .. })));
        assert_eq!(tx.attempts.len(), 1);
    }
}
