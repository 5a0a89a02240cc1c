//! A bounded count of callers waiting for something scarce (a slot, a
//! credit): one more than the bound is refused at once instead of queued.

use std::sync::atomic::{AtomicUsize, Ordering};

/// How many callers wait now.
#[derive(Debug, Default)]
pub struct Waiters(AtomicUsize);

impl Waiters {
    /// None waiting.
    pub const fn new() -> Self {
        Self(AtomicUsize::new(0))
    }

    /// Counts the caller in while fewer than `max` wait, until the
    /// returned guard drops; `None`, with nothing counted, when `max`
    /// wait already.
    pub fn enter(&self, max: usize) -> Option<Waiting<'_>> {
        if self.0.fetch_add(1, Ordering::Relaxed) >= max {
            self.0.fetch_sub(1, Ordering::Relaxed);
            return None;
        }
        Some(Waiting(&self.0))
    }

    /// How many wait now.
    pub fn count(&self) -> usize {
        self.0.load(Ordering::Relaxed)
    }
}

/// One caller counted in its [`Waiters`] while this lives.
#[must_use = "the caller is counted only while the guard lives"]
#[derive(Debug)]
pub struct Waiting<'a>(&'a AtomicUsize);

impl Drop for Waiting<'_> {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::Relaxed);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn at_most_max_are_counted_and_each_leaves_with_its_guard() {
        let w = Waiters::new();
        let a = w.enter(2).expect("first");
        let b = w.enter(2).expect("second");
        assert!(w.enter(2).is_none(), "a third is refused");
        assert_eq!(w.count(), 2, "the refused one is not counted");
        drop(a);
        assert_eq!(w.count(), 1);
        let c = w.enter(2).expect("room again");
        drop((b, c));
        assert_eq!(w.count(), 0);
    }
}
