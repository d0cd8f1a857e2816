//! Group commit: writes that arrive while a commit is in progress are merged
//! into the next single transaction (and the next single fsync).
//!
//! Leader/follower: a caller queues its job; if no commit is running it
//! becomes the leader, takes everything queued and commits it; otherwise it
//! waits. When a leader finishes it wakes everyone: callers whose job was
//! committed return their own result, and one caller with a queued job leads
//! the next batch. Durable throughput then grows with the number of writers
//! instead of being capped at one fsync per write.

use std::sync::{Arc, Condvar, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use crate::error::Result;
use crate::store::{lock, relock};

struct Slot<T> {
    result: Mutex<Option<Result<T>>>,
}

struct Queue<J, T> {
    pending: Vec<(J, Arc<Slot<T>>)>,
    leader_active: bool,
    /// Reads in progress that background work yields to (see [`GroupCommit::reading`]).
    reads: usize,
    /// When the last batch or marked read ended.
    last_busy_end: Option<Instant>,
}

pub struct GroupCommit<J, T> {
    queue: Mutex<Queue<J, T>>,
    finished: Condvar,
}

impl<J, T> Default for GroupCommit<J, T> {
    fn default() -> Self {
        GroupCommit {
            queue: Mutex::new(Queue {
                pending: Vec::new(),
                leader_active: false,
                reads: 0,
                last_busy_end: None,
            }),
            finished: Condvar::new(),
        }
    }
}

impl<J, T> GroupCommit<J, T> {
    /// Queues `job` and returns its result once it is committed (or failed).
    /// `commit` receives every job of a batch and must return one result per
    /// job, in order.
    pub fn submit(&self, job: J, commit: impl Fn(&[J]) -> Vec<Result<T>>) -> Result<T> {
        let slot = Arc::new(Slot {
            result: Mutex::new(None),
        });
        let mut queue = lock(&self.queue);
        queue.pending.push((job, Arc::clone(&slot)));
        loop {
            if let Some(result) = lock(&slot.result).take() {
                return result;
            }
            if !queue.leader_active {
                queue.leader_active = true;
                let batch = std::mem::take(&mut queue.pending);
                drop(queue);
                self.lead(batch, &commit);
                queue = self.end_lead();
                continue;
            }
            queue = self.wait(queue);
        }
    }

    /// Commits `job` alone, at once, if no batch is committing or queued;
    /// `None` (the job dropped unrun) otherwise.
    pub fn try_submit(&self, job: J, commit: impl Fn(&[J]) -> Vec<Result<T>>) -> Option<Result<T>> {
        let mut queue = lock(&self.queue);
        if queue.leader_active || !queue.pending.is_empty() {
            return None;
        }
        queue.leader_active = true;
        drop(queue);
        let result = commit(std::slice::from_ref(&job)).pop();
        drop(self.end_lead());
        result
    }

    /// Marks the batch done and wakes the waiting callers: those whose job
    /// it held return, and one with a queued job leads the next batch.
    fn end_lead(&self) -> MutexGuard<'_, Queue<J, T>> {
        let mut queue = lock(&self.queue);
        queue.leader_active = false;
        queue.last_busy_end = Some(Instant::now());
        self.finished.notify_all();
        queue
    }

    /// Marks a read in progress (a transcript load) until the guard drops,
    /// so that [`Self::wait_quiet`] waits for it as for a batch: background
    /// work would otherwise take the core of the read's helper thread.
    pub fn reading(&self) -> Reading<'_, J, T> {
        lock(&self.queue).reads += 1;
        Reading(self)
    }

    /// Waits until no batch has been committing or queued, and no marked
    /// read running, for `quiet`, or until `limit` has passed: background work
    /// that shares the writer goes after a burst of writes or loads (a
    /// caller flushing again and again), yet a steady stream of them cannot
    /// starve it.
    pub fn wait_quiet(&self, quiet: Duration, limit: Duration) {
        let deadline = Instant::now() + limit;
        let mut queue = lock(&self.queue);
        loop {
            let now = Instant::now();
            let busy = queue.leader_active || !queue.pending.is_empty() || queue.reads > 0;
            let quiet_at = queue.last_busy_end.map_or(now, |end| end + quiet);
            if (!busy && quiet_at <= now) || now >= deadline {
                return;
            }
            let until = if busy {
                deadline
            } else {
                quiet_at.min(deadline)
            };
            queue = relock(self.finished.wait_timeout(queue, until - now)).0;
        }
    }

    fn lead(&self, batch: Vec<(J, Arc<Slot<T>>)>, commit: &impl Fn(&[J]) -> Vec<Result<T>>) {
        let (jobs, slots): (Vec<J>, Vec<Arc<Slot<T>>>) = batch.into_iter().unzip();
        let results = commit(&jobs);
        debug_assert_eq!(results.len(), slots.len());
        for (slot, result) in slots.iter().zip(results) {
            *lock(&slot.result) = Some(result);
        }
    }

    fn wait<'a>(&self, queue: MutexGuard<'a, Queue<J, T>>) -> MutexGuard<'a, Queue<J, T>> {
        relock(self.finished.wait(queue))
    }
}

/// A read in progress, from [`GroupCommit::reading`].
pub struct Reading<'a, J, T>(&'a GroupCommit<J, T>);

impl<J, T> Drop for Reading<'_, J, T> {
    fn drop(&mut self) {
        let mut queue = lock(&self.0.queue);
        queue.reads -= 1;
        queue.last_busy_end = Some(Instant::now());
        self.0.finished.notify_all();
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicUsize, Ordering};

    #[test]
    fn every_caller_gets_its_own_result_and_batches_merge() {
        let gc: Arc<GroupCommit<usize, usize>> = Arc::new(GroupCommit::default());
        let commits = Arc::new(AtomicUsize::new(0));
        let threads: Vec<_> = (0..32)
            .map(|i| {
                let gc = Arc::clone(&gc);
                let commits = Arc::clone(&commits);
                std::thread::spawn(move || {
                    gc.submit(i, |jobs| {
                        commits.fetch_add(1, Ordering::SeqCst);
                        std::thread::sleep(std::time::Duration::from_millis(5));
                        jobs.iter().map(|j| Ok(j * 10)).collect()
                    })
                    .unwrap()
                })
            })
            .collect();
        for (i, t) in threads.into_iter().enumerate() {
            assert_eq!(t.join().unwrap(), i * 10);
        }
        assert!(commits.load(Ordering::SeqCst) < 32, "no batch was merged");
    }

    #[test]
    fn a_failing_job_does_not_fail_its_batch_mates() {
        let gc: GroupCommit<i32, i32> = GroupCommit::default();
        let out = gc.submit(-1, |jobs| {
            jobs.iter()
                .map(|&j| {
                    if j < 0 {
                        Err(crate::error::Error::Config("negative".into()))
                    } else {
                        Ok(j)
                    }
                })
                .collect()
        });
        assert!(out.is_err());
        assert_eq!(
            gc.submit(3, |jobs| jobs.iter().map(|&j| Ok(j)).collect())
                .unwrap(),
            3
        );
    }

    #[test]
    fn wait_quiet_waits_past_the_batch_in_progress_but_no_longer_than_its_limit() {
        let gc: Arc<GroupCommit<u8, u8>> = Arc::new(GroupCommit::default());
        let batch_done = Arc::new(Mutex::new(None));
        let (started_tx, started_rx) = std::sync::mpsc::channel();
        let leader = std::thread::spawn({
            let gc = Arc::clone(&gc);
            let batch_done = Arc::clone(&batch_done);
            move || {
                gc.submit(1, |jobs| {
                    started_tx.send(()).unwrap();
                    std::thread::sleep(Duration::from_millis(400));
                    *batch_done.lock().unwrap() = Some(Instant::now());
                    jobs.iter().map(|&j| Ok(j)).collect()
                })
            }
        });
        started_rx.recv().unwrap();
        let quiet = Duration::from_millis(30);
        gc.wait_quiet(quiet, Duration::from_millis(5));
        assert!(
            batch_done.lock().unwrap().is_none(),
            "waited past its limit, to the batch's end"
        );
        gc.wait_quiet(quiet, Duration::from_secs(5));
        let returned = Instant::now();
        let done = batch_done
            .lock()
            .unwrap()
            .expect("returned before the batch ended");
        assert!(
            returned >= done + quiet,
            "did not wait for the quiet after the batch"
        );
        assert_eq!(leader.join().unwrap().unwrap(), 1);
        let start = Instant::now();
        gc.wait_quiet(Duration::ZERO, Duration::from_secs(5));
        assert!(
            start.elapsed() < Duration::from_secs(1),
            "waited while idle"
        );
    }

    #[test]
    fn wait_quiet_waits_past_a_read_in_progress() {
        let gc: Arc<GroupCommit<u8, u8>> = Arc::new(GroupCommit::default());
        let reading = gc.reading();
        let waiter = std::thread::spawn({
            let gc = Arc::clone(&gc);
            move || {
                gc.wait_quiet(Duration::from_millis(1), Duration::from_secs(5));
                Instant::now()
            }
        });
        std::thread::sleep(Duration::from_millis(100));
        assert!(!waiter.is_finished(), "returned while a read ran");
        let read_end = Instant::now();
        drop(reading);
        assert!(
            waiter.join().unwrap() >= read_end,
            "returned before the read ended"
        );
    }
}
