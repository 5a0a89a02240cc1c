//! Exponential backoff for retrying `accept`.

use std::time::Duration;

/// The pause before retrying after a failure: `min`, doubling on each
/// consecutive failure up to `max`, back to `min` after a success.
///
/// A listener that fails `accept` because the process ran out of file
/// descriptors (EMFILE, ENFILE), the kernel ran out of buffers (ENOBUFS,
/// ENOMEM) or the connection was aborted in the queue (ECONNABORTED) keeps
/// running: it waits [`Backoff::failed`] and tries again, as the Linux
/// server's `svc_tcp_accept` does by leaving the listener armed. Without
/// the pause, a full descriptor table turns the accept loop into a spin.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Backoff {
    min: Duration,
    max: Duration,
    next: Duration,
}

impl Backoff {
    /// Backoff from `min` doubling to `max`.
    pub const fn new(min: Duration, max: Duration) -> Self {
        Self {
            min,
            max,
            next: min,
        }
    }

    /// The listeners' backoff: 10 ms doubling to 500 ms.
    pub const fn accept() -> Self {
        Self::new(Duration::from_millis(10), Duration::from_millis(500))
    }

    /// Records a failure; returns how long to wait before retrying.
    pub fn failed(&mut self) -> Duration {
        let d = self.next;
        self.next = self.next.saturating_mul(2).min(self.max);
        d
    }

    /// Records a success: the next failure waits `min` again.
    pub fn succeeded(&mut self) {
        self.next = self.min;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn doubles_to_the_cap_and_resets_on_success() {
        let mut b = Backoff::accept();
        let waits: Vec<u128> = (0..9).map(|_| b.failed().as_millis()).collect();
        assert_eq!(waits, [10, 20, 40, 80, 160, 320, 500, 500, 500]);
        b.succeeded();
        assert_eq!(b.failed(), Duration::from_millis(10));
    }
}
