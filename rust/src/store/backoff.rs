//! The pause between two tries of a write that found the store busy:
//! jittered and growing, so that competing writers spread out instead of
//! convoying.

use std::time::Duration;

pub struct Backoff {
    pause_ms: u64,
}

impl Default for Backoff {
    fn default() -> Self {
        Backoff { pause_ms: 2 }
    }
}

impl Backoff {
    /// Sleeps a random part of the current pause, then doubles it (to 100 ms).
    pub fn sleep(&mut self) {
        std::thread::sleep(Duration::from_millis(fastrand::u64(1..=self.pause_ms)));
        self.pause_ms = (self.pause_ms * 2).min(100);
    }
}
