//! A background thread that runs deferred work in bounded steps: woken when
//! work is left, stopped (and joined) at close.
//!
//! It knows nothing of SQL: the backend hands it a step (index one chunk of
//! pending rows) that says whether more remains. A failed step is retried
//! later, after a growing pause; the work itself is durable, so a failure
//! only delays it and never reaches the callers whose commits left it.

use std::sync::{Arc, Condvar, Mutex, MutexGuard};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use crate::store::{lock, relock};

/// What one step left behind.
pub enum Step {
    More,
    Done,
    Failed,
}

/// A backend's indexer takes its turn once no write or transcript load has
/// run for `INDEXER_QUIET` (a caller writing or loading again and again goes
/// first, rather than waiting for a chunk before each write or sharing its
/// cores with it), or after `INDEXER_PATIENCE` regardless, so a steady
/// stream of them cannot starve it.
pub const INDEXER_QUIET: Duration = Duration::from_millis(3);
pub const INDEXER_PATIENCE: Duration = Duration::from_millis(50);

const FIRST_RETRY: Duration = Duration::from_millis(10);
const LAST_RETRY: Duration = Duration::from_secs(2);

#[derive(Default)]
struct Flags {
    work: bool,
    stop: bool,
}

#[derive(Default)]
struct Signal {
    flags: Mutex<Flags>,
    changed: Condvar,
}

pub struct Indexer {
    signal: Arc<Signal>,
    thread: Mutex<Option<JoinHandle<()>>>,
}

impl Signal {
    fn flags(&self) -> MutexGuard<'_, Flags> {
        lock(&self.flags)
    }

    /// Blocks until work is announced or, after a failure, the `retry` pause
    /// has passed. False once the indexer is stopping.
    fn wait_for_work(&self, retry: Option<Duration>) -> bool {
        let deadline = retry.map(|pause| Instant::now() + pause);
        let mut flags = self.flags();
        loop {
            if flags.stop {
                return false;
            }
            if std::mem::take(&mut flags.work) {
                return true;
            }
            flags = match deadline {
                None => relock(self.changed.wait(flags)),
                Some(deadline) => {
                    let left = deadline.saturating_duration_since(Instant::now());
                    if left.is_zero() {
                        return true;
                    }
                    relock(self.changed.wait_timeout(flags, left)).0
                }
            };
        }
    }
}

impl Indexer {
    /// Starts the thread; with `work_waiting` it runs `step` at once.
    pub fn spawn(
        work_waiting: bool,
        mut step: impl FnMut() -> Step + Send + 'static,
    ) -> std::io::Result<Self> {
        let signal = Arc::new(Signal::default());
        signal.flags().work = work_waiting;
        let thread = std::thread::Builder::new()
            .name("hermes-indexer".into())
            .spawn({
                let signal = Arc::clone(&signal);
                move || {
                    let mut retry: Option<Duration> = None;
                    while signal.wait_for_work(retry) {
                        retry =
                            loop {
                                match step() {
                                    Step::More if !signal.flags().stop => continue,
                                    Step::More | Step::Done => break None,
                                    Step::Failed => {
                                        break Some(retry.map_or(FIRST_RETRY, |pause| {
                                            (pause * 2).min(LAST_RETRY)
                                        }))
                                    }
                                }
                            };
                    }
                }
            })?;
        Ok(Indexer {
            signal,
            thread: Mutex::new(Some(thread)),
        })
    }

    /// Announces work: the thread runs steps until none is left.
    pub fn wake(&self) {
        self.signal.flags().work = true;
        self.signal.changed.notify_one();
    }

    /// Stops the thread after its current step and waits for it. Idempotent.
    pub fn stop(&self) {
        self.signal.flags().stop = true;
        self.signal.changed.notify_one();
        if let Some(thread) = lock(&self.thread).take() {
            // A panicked step has nothing left to clean up: its transaction
            // was rolled back with the unwinding.
            let _ = thread.join();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::test_support::wait_until;
    use std::sync::atomic::{AtomicUsize, Ordering};

    /// An indexer with work waiting whose step `n` (from 0) does what
    /// `script(n)` says, and the count of steps it ran.
    fn scripted(script: fn(usize) -> Step) -> (Indexer, Arc<AtomicUsize>) {
        let steps = Arc::new(AtomicUsize::new(0));
        let indexer = Indexer::spawn(true, {
            let steps = Arc::clone(&steps);
            move || script(steps.fetch_add(1, Ordering::SeqCst))
        })
        .unwrap();
        (indexer, steps)
    }

    #[test]
    fn runs_steps_until_done_then_sleeps_until_woken() {
        let (indexer, steps) = scripted(|n| match n {
            0 | 1 => Step::More,
            _ => Step::Done,
        });
        wait_until(|| steps.load(Ordering::SeqCst) == 3);
        std::thread::sleep(Duration::from_millis(30));
        assert_eq!(steps.load(Ordering::SeqCst), 3, "ran without work");
        indexer.wake();
        wait_until(|| steps.load(Ordering::SeqCst) == 4);
        indexer.stop();
        indexer.stop();
    }

    #[test]
    fn a_failed_step_is_retried_without_a_wake() {
        let (indexer, steps) = scripted(|n| match n {
            0..=2 => Step::Failed,
            _ => Step::Done,
        });
        wait_until(|| steps.load(Ordering::SeqCst) == 4);
        indexer.stop();
    }
}
