//! Counters for the bounds a peer can run into.
//!
//! Every resource a peer can make the server hold (connections, queued
//! bytes, calls in flight, client state, cache entries) has a bound. When
//! a bound trips, the code that enforces it calls [`Limit::trip`], which
//!
//! - counts the trip (read back with [`Limit::count`], or all of them with
//!   [`snapshot`], for tests, `stat` and metrics), and
//! - logs one `warn` line naming the limit, at most once per second per
//!   limit, with how many trips that second's silence swallowed, so a flood
//!   cannot flood the log too.
//!
//! Limits are `static`s next to the code that enforces them:
//!
//! ```
//! use limits::Limit;
//! static CONNS_PER_CLIENT: Limit = Limit::new("tcp.conns_per_client");
//! CONNS_PER_CLIENT.trip(format_args!("refused a connection from {}", "192.0.2.1"));
//! assert!(CONNS_PER_CLIENT.count() >= 1);
//! ```

use std::fmt;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Mutex;
use std::time::{SystemTime, UNIX_EPOCH};

/// Every limit that has tripped at least once, in first-trip order.
static REGISTRY: Mutex<Vec<&'static Limit>> = Mutex::new(Vec::new());

/// One named bound and its trip counter.
#[derive(Debug)]
pub struct Limit {
    name: &'static str,
    trips: AtomicU64,
    /// Millisecond clock of the last log line.
    last_log_ms: AtomicU64,
    /// Trips not logged since the last log line.
    suppressed: AtomicU64,
    registered: AtomicBool,
}

impl Limit {
    /// A limit called `name` (dotted, e.g. `tcp.queued_reply_bytes`).
    pub const fn new(name: &'static str) -> Self {
        Self {
            name,
            trips: AtomicU64::new(0),
            last_log_ms: AtomicU64::new(0),
            suppressed: AtomicU64::new(0),
            registered: AtomicBool::new(false),
        }
    }

    /// The limit's name.
    pub fn name(&self) -> &'static str {
        self.name
    }

    /// How many times it has tripped in this process.
    pub fn count(&self) -> u64 {
        self.trips.load(Ordering::Relaxed)
    }

    /// Records one trip; `what` says what was refused or dropped.
    pub fn trip(&'static self, what: fmt::Arguments<'_>) {
        let n = self.trips.fetch_add(1, Ordering::Relaxed) + 1;
        self.register();
        let now = now_ms();
        let last = self.last_log_ms.load(Ordering::Relaxed);
        let due = now.saturating_sub(last) >= 1000 || last == 0;
        if due
            && self
                .last_log_ms
                .compare_exchange(last, now.max(1), Ordering::Relaxed, Ordering::Relaxed)
                .is_ok()
        {
            let swallowed = self.suppressed.swap(0, Ordering::Relaxed);
            tracing::warn!(
                limit = self.name,
                trips = n,
                suppressed = swallowed,
                "limit reached: {what}"
            );
        } else {
            self.suppressed.fetch_add(1, Ordering::Relaxed);
        }
    }

    fn register(&'static self) {
        if !self.registered.swap(true, Ordering::Relaxed) {
            if let Ok(mut r) = REGISTRY.lock() {
                r.push(self);
            }
        }
    }
}

/// `(name, trips)` of every limit that has tripped in this process.
pub fn snapshot() -> Vec<(&'static str, u64)> {
    REGISTRY
        .lock()
        .map(|r| r.iter().map(|l| (l.name, l.count())).collect())
        .unwrap_or_default()
}

/// Trips of the limit named `name` in this process so far (0 when it
/// never tripped): what a test reads to see that a bound held.
pub fn trips(name: &str) -> u64 {
    REGISTRY
        .lock()
        .ok()
        .and_then(|r| r.iter().find(|l| l.name == name).map(|l| l.count()))
        .unwrap_or(0)
}

fn now_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX))
        .unwrap_or(0)
}

#[cfg(test)]
mod tests {
    use super::*;

    static A: Limit = Limit::new("test.a");
    static B: Limit = Limit::new("test.b");

    #[test]
    fn trips_are_counted_and_listed() {
        for i in 0..1000 {
            A.trip(format_args!("call {i}"));
        }
        B.trip(format_args!("once"));
        assert_eq!(A.count(), 1000);
        assert_eq!(B.count(), 1);
        let snap = snapshot();
        assert!(snap.contains(&("test.a", 1000)));
        assert!(snap.contains(&("test.b", 1)));
        assert_eq!((trips("test.a"), trips("test.b")), (1000, 1));
        assert_eq!(trips("test.never"), 0);
        // A flood logs once a second, the rest are counted as suppressed.
        assert!(A.suppressed.load(Ordering::Relaxed) >= 998);
    }
}
