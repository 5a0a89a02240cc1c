//! Arrival order of the calls of one connection.
//!
//! Every call gets a [`Ticket`] from a [`Turns`] when it is received, in
//! the order the calls arrive. A call waits for its turn ([`Ticket::wait`])
//! before a step that must follow the connection's arrival order, and
//! passes the turn on by dropping its ticket. A call that ends early (an
//! error answer, a dropped connection) drops its ticket before its turn:
//! that turn is then skipped, never waited for.
//!
//! The server uses two: one so calls take their share of the RDMA Read
//! budget in arrival order (the earliest unfinished call never waits for
//! budget held by later ones), one so calls are handed to the RPC server in
//! arrival order, as over TCP and in Linux's svcrdma (which pulls a call's
//! chunks before it takes the next call); their pulls still overlap.
//! RFC 5531 §7 leaves call order to the transport; NFSv4 clients rely on
//! it, e.g. a DELEGRETURN sent after WRITEs of the delegated file.

use std::collections::{BTreeSet, HashMap};
use std::sync::{Arc, Mutex, MutexGuard};
use std::task::{Poll, Waker};

/// The turns of one connection's calls.
#[derive(Debug, Default)]
pub(super) struct Turns {
    state: Mutex<State>,
}

#[derive(Debug, Default)]
struct State {
    /// Tickets issued so far.
    issued: u64,
    /// The ticket whose turn it is.
    next: u64,
    /// Tickets dropped before their turn (at most the calls in flight).
    skipped: BTreeSet<u64>,
    /// The connection is gone: no turn comes any more.
    closed: bool,
    /// Tickets waiting for their turn; only the next one is woken.
    waiting: HashMap<u64, Waker>,
}

impl State {
    /// Takes the waker of a ticket that waits. Most calls never wait (the
    /// one whose turn it is runs at once), so the map is usually empty:
    /// skipping the lookup then saves hashing the ticket (SipHash, about
    /// 140 instructions), four times per call.
    fn unwait(&mut self, seq: u64) -> Option<Waker> {
        if self.waiting.is_empty() {
            return None;
        }
        self.waiting.remove(&seq)
    }
}

/// The connection closed while a call waited for its turn.
#[derive(Debug, PartialEq, Eq)]
pub(super) struct TurnsClosed;

/// One call's place in the order; dropping it passes the turn on.
#[derive(Debug)]
pub(super) struct Ticket {
    turns: Arc<Turns>,
    seq: u64,
}

impl Turns {
    fn lock(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// The next call's ticket.
    pub(super) fn issue(self: &Arc<Self>) -> Ticket {
        let mut st = self.lock();
        let seq = st.issued;
        st.issued += 1;
        Ticket {
            turns: Arc::clone(self),
            seq,
        }
    }

    fn pass(&self, seq: u64) {
        let mut st = self.lock();
        st.unwait(seq);
        if seq != st.next {
            st.skipped.insert(seq);
            return;
        }
        st.next += 1;
        loop {
            let n = st.next;
            if !st.skipped.remove(&n) {
                break;
            }
            st.next += 1;
        }
        let next = st.next;
        let w = st.unwait(next);
        drop(st);
        if let Some(w) = w {
            w.wake();
        }
    }

    /// The connection is gone (or an earlier call failed so that it will
    /// be): waiting calls stop, and no later call gets its turn, so none
    /// runs after an earlier one that never will.
    pub(super) fn close(&self) {
        let mut st = self.lock();
        st.closed = true;
        let all: Vec<Waker> = st.waiting.drain().map(|(_, w)| w).collect();
        drop(st);
        all.into_iter().for_each(Waker::wake);
    }

    #[cfg(test)]
    fn skipped(&self) -> usize {
        let st = self.lock();
        assert!(st.waiting.len() <= (st.issued - st.next) as usize);
        st.skipped.len()
    }
}

impl Ticket {
    /// Waits until every earlier ticket has been dropped.
    pub(super) async fn wait(&self) -> Result<(), TurnsClosed> {
        std::future::poll_fn(|cx| {
            let mut st = self.turns.lock();
            if st.closed {
                st.unwait(self.seq);
                return Poll::Ready(Err(TurnsClosed));
            }
            if st.next == self.seq {
                st.unwait(self.seq);
                return Poll::Ready(Ok(()));
            }
            st.waiting.insert(self.seq, cx.waker().clone());
            Poll::Pending
        })
        .await
    }
}

impl Drop for Ticket {
    fn drop(&mut self) {
        self.turns.pass(self.seq);
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;

    async fn ready(t: &Ticket) -> bool {
        tokio::time::timeout(Duration::from_millis(20), t.wait())
            .await
            .is_ok_and(|r| r.is_ok())
    }

    #[tokio::test]
    async fn a_later_ticket_waits_for_every_earlier_one() {
        let turns = Arc::new(Turns::default());
        let (a, b, c) = (turns.issue(), turns.issue(), turns.issue());
        assert!(!ready(&c).await);
        drop(b);
        assert!(!ready(&c).await, "c ran before a");
        assert!(ready(&a).await);
        drop(a);
        assert!(ready(&c).await);
        assert_eq!(turns.skipped(), 0);
    }

    #[tokio::test]
    async fn a_waiter_wakes_when_its_turn_comes() {
        let turns = Arc::new(Turns::default());
        let (a, b) = (turns.issue(), turns.issue());
        let waiter = tokio::spawn(async move { b.wait().await });
        tokio::time::sleep(Duration::from_millis(10)).await;
        assert!(!waiter.is_finished());
        drop(a);
        let r = tokio::time::timeout(Duration::from_secs(5), waiter)
            .await
            .expect("woken");
        assert_eq!(r.unwrap(), Ok(()));
    }

    #[tokio::test]
    async fn closing_stops_waiters_and_later_turns() {
        let turns = Arc::new(Turns::default());
        let (a, b) = (turns.issue(), turns.issue());
        let waiter = tokio::spawn(async move { b.wait().await });
        tokio::time::sleep(Duration::from_millis(10)).await;
        turns.close();
        drop(a);
        let r = tokio::time::timeout(Duration::from_secs(5), waiter)
            .await
            .expect("woken");
        assert_eq!(r.unwrap(), Err(TurnsClosed));
        assert_eq!(turns.issue().wait().await, Err(TurnsClosed));
    }

    #[tokio::test]
    async fn tickets_dropped_out_of_order_are_all_skipped() {
        let turns = Arc::new(Turns::default());
        let t: Vec<Ticket> = (0..5).map(|_| turns.issue()).collect();
        let mut t = t.into_iter();
        let first = t.next().unwrap();
        let rest: Vec<Ticket> = t.collect();
        drop(rest);
        assert_eq!(turns.skipped(), 4);
        drop(first);
        assert_eq!(turns.skipped(), 0);
        assert!(ready(&turns.issue()).await);
    }
}
