//! How many message rows this store committed to each session. With the
//! live `message_count` it tells this process's writes from other
//! processes' (the gateway's coherence guard).

use std::collections::HashMap;
use std::sync::Mutex;

use super::{lock, WriteOp, WriteOut};
use crate::error::Result;

#[derive(Default)]
pub struct OwnAppends {
    by_session: Mutex<HashMap<String, u64>>,
}

impl OwnAppends {
    /// Counts the appends of a committed batch that succeeded.
    pub fn record(&self, jobs: &[WriteOp], results: &[Result<WriteOut>]) {
        let mut own = lock(&self.by_session);
        for (job, result) in jobs.iter().zip(results) {
            if let Ok(out) = result {
                job.for_each_append(out, &mut |session_id, rows| {
                    // Looked up before inserting: most appends go to a known session.
                    match own.get_mut(session_id) {
                        Some(n) => *n += rows as u64,
                        None => {
                            own.insert(session_id.to_owned(), rows as u64);
                        }
                    }
                });
            }
        }
    }

    pub fn of(&self, session_id: &str) -> u64 {
        lock(&self.by_session).get(session_id).copied().unwrap_or(0)
    }
}

#[cfg(test)]
mod tests {
    use super::super::test_support::append;
    use super::*;
    use crate::error::Error;

    #[test]
    fn only_committed_appends_count_including_those_inside_a_transaction() {
        let own = OwnAppends::default();
        let jobs = [
            append("a"),
            append("b"),
            WriteOp::Transaction(vec![append("a"), append("c")]),
        ];
        let results = [
            Ok(WriteOut::Ids(vec![1, 2])),
            Err(Error::Config("failed".into())),
            Ok(WriteOut::Many(vec![
                WriteOut::Ids(vec![3]),
                WriteOut::Ids(vec![4, 5, 6]),
            ])),
        ];
        own.record(&jobs, &results);
        assert_eq!((own.of("a"), own.of("b"), own.of("c")), (3, 0, 3));
        assert_eq!(own.of("never"), 0);
    }
}
