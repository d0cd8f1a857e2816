//! Reusable threads for work that borrows from the caller's stack, as a
//! scoped thread does, without starting a thread each time: on a virtual
//! machine a new thread ran ~70 µs after it was spawned, most of the time a
//! short load takes. Waking a sleeping helper takes tens of microseconds
//! too (~30 µs from hand-over to its first step of a load, measured here),
//! so a helper stays awake for [`STAY_AWAKE`] after a job, yielding its core:
//! the next job of a burst starts at once, and a caller can ask whether one
//! is awake ([`one_awake`]) to hand over sooner.
//!
//! Helpers are started when none is idle and kept (up to [`IDLE_KEPT`]) for
//! the next job. A forked child starts its own: its parent's helpers did not
//! survive the fork.

use std::panic::{self, AssertUnwindSafe};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc::{self, Receiver, Sender, TryRecvError};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use crate::store::lock;

type Job = Box<dyn FnOnce() + Send + 'static>;

/// Idle helpers kept for later jobs; more are started while all are busy.
const IDLE_KEPT: usize = 4;

/// How long a helper keeps looking for its next job after one ended, giving
/// its core to any other thread that wants it, before it sleeps: jobs that
/// come in a burst (a gateway loading transcripts one after another) then
/// find it awake instead of waking it.
const STAY_AWAKE: Duration = Duration::from_micros(300);

struct Helper {
    jobs: Sender<Job>,
    /// True while the thread is looking for jobs without sleeping.
    awake: Arc<AtomicBool>,
}

/// The idle helpers, and the process they belong to.
static IDLE: Mutex<(u32, Vec<Helper>)> = Mutex::new((0, Vec::new()));

/// This process's idle helpers, locked.
fn idle_helpers() -> MutexGuard<'static, (u32, Vec<Helper>)> {
    let mut idle = lock(&IDLE);
    let pid = std::process::id();
    if idle.0 != pid {
        // Another process's helpers (we are its forked child): their threads
        // are gone here. They are forgotten, not dropped: dropping one
        // disconnects its channel, which takes a lock that a parent's helper
        // may have held at the fork, and would then wait forever.
        idle.0 = pid;
        idle.1.drain(..).for_each(std::mem::forget);
    }
    idle
}

fn take_helper() -> Helper {
    let mut idle = idle_helpers();
    // An awake one first: it starts the job at once.
    match idle.1.iter().rposition(|h| h.awake.load(Ordering::Relaxed)) {
        Some(at) => idle.1.swap_remove(at),
        None => idle.1.pop().unwrap_or_else(start_helper),
    }
}

fn give_back(helper: Helper) {
    let mut idle = lock(&IDLE);
    if idle.0 == std::process::id() && idle.1.len() < IDLE_KEPT {
        idle.1.push(helper);
    } // else dropped: its thread ends with its job channel.
}

/// Whether an idle helper is awake: a job handed over now starts at once.
pub fn one_awake() -> bool {
    idle_helpers()
        .1
        .iter()
        .any(|h| h.awake.load(Ordering::Relaxed))
}

fn start_helper() -> Helper {
    let (jobs, received) = mpsc::channel::<Job>();
    let awake = Arc::new(AtomicBool::new(false));
    let flag = Arc::clone(&awake);
    std::thread::Builder::new()
        .name("hermes-helper".into())
        .spawn(move || {
            while let Some(job) = next_job(&received, &flag) {
                job();
            }
        })
        .expect("could not start a helper thread: the process is out of threads or memory");
    Helper { jobs, awake }
}

/// The next job, looked for awake for [`STAY_AWAKE`], then asleep; None once
/// the helper was dropped.
fn next_job(received: &Receiver<Job>, awake: &AtomicBool) -> Option<Job> {
    awake.store(true, Ordering::Relaxed);
    recv_awake_for(received, STAY_AWAKE, || {
        awake.store(false, Ordering::Relaxed)
    })
}

/// The next message of `received`, looked for awake for `awake_for`
/// (yielding the core between looks: the sender may be waiting for it),
/// then asleep after `before_sleep`; None once every sender is gone.
/// Falling asleep and being woken costs tens of microseconds on a virtual
/// machine, so a message expected soon is better waited for awake.
pub fn recv_awake_for<T>(
    received: &Receiver<T>,
    awake_for: Duration,
    before_sleep: impl FnOnce(),
) -> Option<T> {
    let until = Instant::now() + awake_for;
    loop {
        match received.try_recv() {
            Ok(message) => return Some(message),
            Err(TryRecvError::Disconnected) => return None,
            Err(TryRecvError::Empty) if Instant::now() < until => std::thread::yield_now(),
            Err(TryRecvError::Empty) => break,
        }
    }
    before_sleep();
    received.recv().ok()
}

/// Runs `job` on a helper thread while `here` runs on this one, and returns
/// both results once both have finished. A panic in either is resumed here
/// after both finished.
///
/// `here` must make `job` finish once `here` itself is done (for instance by
/// dropping the receiving end of a channel `job` sends on): this call waits
/// for `job` even while `here` unwinds.
pub fn beside<'a, R: Send + 'static, T>(
    job: impl FnOnce() -> R + Send + 'a,
    here: impl FnOnce() -> T,
) -> (R, T) {
    let helper = take_helper();
    let (done, finished) = mpsc::sync_channel(1);
    let job: Box<dyn FnOnce() + Send + 'a> = Box::new(move || {
        let out = panic::catch_unwind(AssertUnwindSafe(job));
        let _ = done.send(out);
    });
    // SAFETY: the job borrows for 'a. `Finish` (below) does not let this
    // call return or unwind until the job has ended: it sends on `done`
    // last, after everything it borrowed was dropped with it.
    let job: Job = unsafe { std::mem::transmute::<Box<dyn FnOnce() + Send + 'a>, Job>(job) };
    let helper = match helper.jobs.send(job) {
        Ok(()) => helper,
        Err(unsent) => {
            // Its thread is gone (it never panics: jobs are caught); run the
            // job on a fresh helper instead.
            let fresh = start_helper();
            if fresh.jobs.send(unsent.0).is_err() {
                unreachable!("a helper thread that was just started ended");
            }
            fresh
        }
    };
    let mut finish = Finish {
        finished,
        helper: Some(helper),
    };
    let here_out = here();
    let job_out = finish.wait();
    match job_out {
        Some(Ok(out)) => (out, here_out),
        Some(Err(payload)) => panic::resume_unwind(payload),
        None => unreachable!("a helper ended without reporting its job"),
    }
}

/// Waits for the job to end, on return or unwind, then gives the helper back.
struct Finish<R> {
    finished: Receiver<std::thread::Result<R>>,
    helper: Option<Helper>,
}

impl<R> Finish<R> {
    fn wait(&mut self) -> Option<std::thread::Result<R>> {
        let out = self.finished.recv().ok();
        if let Some(helper) = self.helper.take() {
            give_back(helper);
        }
        out
    }
}

impl<R> Drop for Finish<R> {
    fn drop(&mut self) {
        if self.helper.is_some() {
            let _ = self.wait();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicUsize, Ordering};

    #[test]
    fn the_job_borrows_from_the_caller_and_both_results_come_back() {
        let words = ["a".to_string(), "bc".to_string()];
        let (len, here) = beside(|| words.iter().map(String::len).sum::<usize>(), || 7);
        assert_eq!((len, here), (3, 7));
    }

    #[test]
    fn helpers_are_reused() {
        // Other tests use helpers at the same time, so count distinct threads
        // rather than expect one in particular: without reuse, every job
        // would get a thread of its own.
        let threads: std::collections::HashSet<_> = (0..50)
            .map(|_| beside(|| std::thread::current().id(), || ()).0)
            .collect();
        assert!(threads.len() <= 25, "{} threads ran 50 jobs", threads.len());
        assert!(!threads.contains(&std::thread::current().id()));
    }

    #[test]
    fn a_helper_stays_awake_for_a_while_after_a_job() {
        // Other tests' helpers may be awake too, so this only checks that
        // one is, right after a job, in most tries (a try can lose its core
        // for the whole window on a busy machine).
        let awake = (0..20)
            .filter(|_| {
                beside(|| (), || ());
                one_awake()
            })
            .count();
        assert!(
            awake >= 10,
            "awake right after a job in {awake} of 20 tries"
        );
    }

    #[test]
    fn an_idle_helper_goes_to_sleep() {
        // A helper of its own (not one other tests share): after its job it
        // is awake, then asleep once STAY_AWAKE has passed, so an idle
        // process spends no CPU on it.
        let helper = start_helper();
        let (done, finished) = mpsc::channel();
        let job: Job = Box::new(move || done.send(()).unwrap());
        helper.jobs.send(job).unwrap();
        finished.recv().unwrap();
        let deadline = Instant::now() + Duration::from_secs(5);
        while helper.awake.load(Ordering::Relaxed) {
            assert!(Instant::now() < deadline, "still awake 5 s after its job");
            std::thread::sleep(Duration::from_millis(1));
        }
    }

    #[test]
    fn a_panicking_job_reaches_the_caller_after_here_finished() {
        let here_ran = AtomicUsize::new(0);
        let caught = panic::catch_unwind(AssertUnwindSafe(|| {
            beside(
                || panic!("job failed"),
                || here_ran.fetch_add(1, Ordering::SeqCst),
            )
        }));
        assert!(caught.is_err());
        assert_eq!(here_ran.load(Ordering::SeqCst), 1);
        assert_eq!(beside(|| 1, || 2), (1, 2), "helpers still work");
    }

    #[test]
    fn when_here_panics_the_call_waits_for_the_job_before_unwinding() {
        let job_ended = AtomicUsize::new(0);
        let caught = panic::catch_unwind(AssertUnwindSafe(|| {
            beside(
                || {
                    std::thread::sleep(std::time::Duration::from_millis(50));
                    job_ended.fetch_add(1, Ordering::SeqCst);
                },
                || panic!("here failed"),
            )
        }));
        assert!(caught.is_err());
        assert_eq!(
            job_ended.load(Ordering::SeqCst),
            1,
            "unwound while the job ran"
        );
    }
}
