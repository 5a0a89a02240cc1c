//! Backpressure on the bytes of replies the server holds: per connection,
//! and for the whole server.
//!
//! A client may pipeline calls and never read the replies. Buffering them
//! would let it pin memory at will, so each connection has a budget of
//! reply bytes, charged in two steps: a call reserves
//! [`TcpConfig::reply_reserve`](super::TcpConfig) bytes when it starts (its
//! reply's size is unknown until it runs), the charge becomes the reply's
//! real size when it is ready, and is freed once the reply is written to
//! the socket. No call starts while the budget is spent, and the connection
//! reads nothing more meanwhile, so TCP flow control pushes back on the
//! client instead. This is the Linux server's rule (`svc_tcp_has_wspace`:
//! a transport with less write space than its calls in flight reserved is
//! not read).
//!
//! Every charge is also made on a budget shared by all connections of a
//! server ([`ServerReplyBudget`]), so many connections together cannot
//! hold more than it either. A connection holding nothing may always
//! charge one call, so each connection makes progress however much the
//! others hold: the server holds at most its budget plus one reply per
//! connection.

use std::sync::{Arc, Mutex, MutexGuard};

use tokio::sync::Notify;

use crate::limits::Limit;

static QUEUED_REPLY_BYTES: Limit = Limit::new("tcp.queued_reply_bytes");
static SERVER_REPLY_BYTES: Limit = Limit::new("tcp.server_reply_bytes");

/// The sans-IO accounting: bytes charged against a maximum.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Budget {
    max: usize,
    charged: usize,
    /// The part of `charged` that is replies made and waiting to be
    /// written (the rest is reservations of calls running).
    ready: usize,
}

/// Why a two-level charge has to wait.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Spent {
    /// The connection's own budget.
    Connection,
    /// The server's budget (the connection already holds some of it).
    Server,
}

impl Budget {
    pub(crate) fn new(max: usize) -> Self {
        Self {
            max,
            charged: 0,
            ready: 0,
        }
    }

    /// True if `n` more bytes fit. With nothing charged, any `n` fits,
    /// so a reply larger than the whole budget still gets through.
    fn fits(&self, n: usize) -> bool {
        self.charged == 0 || self.charged.saturating_add(n) <= self.max
    }

    /// Charges `n` bytes if they fit (see [`Self::fits`]).
    #[cfg(test)]
    pub(crate) fn try_charge(&mut self, n: usize) -> bool {
        if !self.fits(n) {
            return false;
        }
        self.charged = self.charged.saturating_add(n);
        true
    }

    /// Charges `n` bytes on a connection's budget and on its server's. A
    /// connection holding nothing (hence nothing on the server's budget
    /// either) passes the server's check whatever the server holds: one
    /// call per connection always makes progress.
    pub(crate) fn try_charge_both(
        conn: &mut Self,
        server: &mut Self,
        n: usize,
    ) -> Result<(), Spent> {
        if !conn.fits(n) {
            return Err(Spent::Connection);
        }
        if conn.charged != 0 && !server.fits(n) {
            return Err(Spent::Server);
        }
        conn.charged = conn.charged.saturating_add(n);
        server.charged = server.charged.saturating_add(n);
        Ok(())
    }

    /// Replaces a reservation of `from` bytes by a ready reply of `to`.
    pub(crate) fn settle(&mut self, from: usize, to: usize) {
        self.charged = self.charged.saturating_sub(from).saturating_add(to);
        self.ready = self.ready.saturating_add(to);
    }

    /// Frees `n` charged bytes: a ready reply's if `ready`, else a
    /// reservation's.
    pub(crate) fn release(&mut self, n: usize, ready: bool) {
        self.charged = self.charged.saturating_sub(n);
        if ready {
            self.ready = self.ready.saturating_sub(n);
        }
    }

    /// True if the ready replies alone leave no room for `n` more bytes:
    /// the peer is not reading them. Otherwise a refused charge waits only
    /// for calls running, which is flow control, not a peer holding memory.
    fn blocked_by_ready(&self, n: usize) -> bool {
        self.ready != 0 && self.ready.saturating_add(n) > self.max
    }

    pub(crate) fn charged(&self) -> usize {
        self.charged
    }
}

/// The reply bytes held by all connections of a server, shared by its TCP
/// listeners ([`TcpServer::with_reply_budget`](super::TcpServer::with_reply_budget));
/// its maximum is [`TcpConfig::max_server_reply_bytes`](super::TcpConfig).
/// When a call has to wait for it, the `tcp.server_reply_bytes` limit
/// trips.
#[derive(Debug)]
pub struct ServerReplyBudget {
    state: Mutex<Budget>,
    freed: Notify,
}

impl ServerReplyBudget {
    /// A budget of `max` bytes.
    pub fn new(max: usize) -> Arc<Self> {
        Arc::new(Self {
            state: Mutex::new(Budget::new(max)),
            freed: Notify::new(),
        })
    }

    /// Bytes charged now: replies waiting to be written and reservations
    /// of the calls running, all connections together.
    pub fn charged(&self) -> usize {
        self.lock().charged()
    }

    fn lock(&self) -> MutexGuard<'_, Budget> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }
}

/// A connection's [`Budget`], shared by its reader, call tasks and writer,
/// charged together with its server's.
#[derive(Debug)]
pub(crate) struct ReplyBudget {
    state: Mutex<Budget>,
    freed: Notify,
    server: Arc<ServerReplyBudget>,
    conn_id: u64,
}

impl ReplyBudget {
    pub(crate) fn new(max: usize, server: Arc<ServerReplyBudget>, conn_id: u64) -> Arc<Self> {
        Arc::new(Self {
            state: Mutex::new(Budget::new(max)),
            freed: Notify::new(),
            server,
            conn_id,
        })
    }

    fn lock(&self) -> MutexGuard<'_, Budget> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Charges `n` bytes on the connection (locked first) and the server.
    /// When they do not fit: which budget is spent, and the bytes of
    /// ready replies holding it if those alone block the charge.
    fn try_charge(&self, n: usize) -> Result<(), (Spent, Option<usize>)> {
        let mut conn = self.lock();
        let mut server = self.server.lock();
        Budget::try_charge_both(&mut conn, &mut server, n).map_err(|spent| {
            let budget = match spent {
                Spent::Connection => &conn,
                Spent::Server => &server,
            };
            (spent, budget.blocked_by_ready(n).then_some(budget.ready))
        })
    }

    /// Waits until `n` bytes fit on the connection and the server, then
    /// charges them. The first wait of a call on replies the peer has not
    /// read trips the `tcp.queued_reply_bytes` or `tcp.server_reply_bytes`
    /// limit; a wait on the reservations of calls still running does not
    /// (it is ordinary flow control on a client with many calls in flight).
    pub(crate) async fn charge(self: &Arc<Self>, n: usize) -> Charge {
        let mut tripped = false;
        loop {
            let conn_freed = self.freed.notified();
            let server_freed = self.server.freed.notified();
            tokio::pin!(conn_freed, server_freed);
            conn_freed.as_mut().enable();
            server_freed.as_mut().enable();
            match self.try_charge(n) {
                Ok(()) => {
                    return Charge {
                        budget: Arc::clone(self),
                        bytes: n,
                        ready: false,
                    }
                }
                Err((_, None)) => {}
                Err(_) if tripped => {}
                Err((spent, Some(held))) => {
                    tripped = true;
                    self.trip(spent, held);
                }
            }
            tokio::select! {
                () = conn_freed => {}
                () = server_freed => {}
            }
        }
    }

    fn trip(&self, spent: Spent, held: usize) {
        let conn = self.conn_id;
        match spent {
            Spent::Connection => QUEUED_REPLY_BYTES.trip(format_args!(
                "connection {conn} holds {held} bytes of unread replies; not reading it"
            )),
            Spent::Server => SERVER_REPLY_BYTES.trip(format_args!(
                "connections hold {held} bytes of replies in total; not reading connection {conn}"
            )),
        }
    }
}

/// Bytes charged for one call, freed when dropped (after its reply is
/// written, or when the call ends without one).
#[derive(Debug)]
pub(crate) struct Charge {
    budget: Arc<ReplyBudget>,
    bytes: usize,
    /// Settled: the charge is a ready reply's, not a reservation.
    ready: bool,
}

impl Charge {
    /// The call's reply is ready: charge its real size instead.
    pub(crate) fn settle(&mut self, bytes: usize) {
        {
            let mut conn = self.budget.lock();
            let mut server = self.budget.server.lock();
            conn.settle(self.bytes, bytes);
            server.settle(self.bytes, bytes);
        }
        if bytes < self.bytes {
            self.budget.freed.notify_waiters();
            self.budget.server.freed.notify_waiters();
        }
        self.bytes = bytes;
        self.ready = true;
    }
}

impl Drop for Charge {
    fn drop(&mut self) {
        {
            let mut conn = self.budget.lock();
            let mut server = self.budget.server.lock();
            conn.release(self.bytes, self.ready);
            server.release(self.bytes, self.ready);
        }
        self.budget.freed.notify_waiters();
        self.budget.server.freed.notify_waiters();
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    #[test]
    fn charges_within_the_maximum_and_always_lets_one_through() {
        let mut b = Budget::new(100);
        assert!(b.try_charge(150), "an empty budget takes anything");
        assert!(!b.try_charge(1));
        b.settle(150, 40);
        assert!(b.try_charge(60));
        assert!(!b.try_charge(1));
        b.release(60, false);
        assert_eq!(b.charged(), 40);
    }

    #[test]
    fn only_ready_replies_count_as_a_peer_not_reading() {
        let mut b = Budget::new(100);
        assert!(b.try_charge(70), "a call running reserves 70");
        assert!(!b.try_charge(40));
        assert!(!b.blocked_by_ready(40), "waiting on a running call");
        b.settle(70, 90);
        assert!(b.blocked_by_ready(40), "a 90-byte reply is not read");
        assert!(!b.blocked_by_ready(10));
        b.release(90, true);
        assert_eq!((b.charged(), b.ready), (0, 0));
    }

    #[test]
    fn a_connection_holding_nothing_passes_a_spent_server_budget() {
        let mut server = Budget::new(100);
        let (mut a, mut b) = (Budget::new(1000), Budget::new(1000));
        assert_eq!(Budget::try_charge_both(&mut a, &mut server, 80), Ok(()));
        assert_eq!(
            Budget::try_charge_both(&mut a, &mut server, 30),
            Err(Spent::Server)
        );
        // `b` holds nothing: it passes, the server goes over its maximum.
        assert_eq!(Budget::try_charge_both(&mut b, &mut server, 30), Ok(()));
        assert_eq!(server.charged(), 110);
        assert_eq!(
            Budget::try_charge_both(&mut b, &mut server, 1),
            Err(Spent::Server)
        );
        assert_eq!(a.charged(), 80, "a refused charge changes nothing");
        let mut small = Budget::new(10);
        small.try_charge(10);
        assert_eq!(
            Budget::try_charge_both(&mut small, &mut Budget::new(100), 5),
            Err(Spent::Connection)
        );
    }

    #[tokio::test]
    async fn waits_until_a_written_reply_frees_its_bytes() {
        let budget = ReplyBudget::new(10, ServerReplyBudget::new(1000), 1);
        let mut first = budget.charge(8).await;
        first.settle(9);
        let waiting = {
            let budget = Arc::clone(&budget);
            tokio::spawn(async move { budget.charge(8).await.bytes })
        };
        tokio::time::sleep(Duration::from_millis(20)).await;
        assert!(!waiting.is_finished(), "9 + 8 bytes exceed 10");
        let before = QUEUED_REPLY_BYTES.count();
        assert!(before >= 1);
        drop(first);
        assert_eq!(waiting.await.unwrap(), 8);
        assert_eq!(budget.lock().charged(), 0);
    }

    #[tokio::test]
    async fn waits_for_the_server_budget_freed_by_another_connection() {
        let server = ServerReplyBudget::new(100);
        let a = ReplyBudget::new(1000, Arc::clone(&server), 1);
        let b = ReplyBudget::new(1000, Arc::clone(&server), 2);
        let mut a_first = a.charge(60).await;
        a_first.settle(60);
        let mut b_first = b.charge(60).await;
        b_first.settle(60);
        assert_eq!(server.charged(), 120, "b held nothing, so it passed");
        let waiting = {
            let b = Arc::clone(&b);
            tokio::spawn(async move { b.charge(30).await.bytes })
        };
        tokio::time::sleep(Duration::from_millis(20)).await;
        assert!(!waiting.is_finished(), "the server budget is spent");
        assert!(SERVER_REPLY_BYTES.count() >= 1);
        drop(a_first);
        assert_eq!(waiting.await.unwrap(), 30);
        drop(b_first);
        assert_eq!(server.charged(), 0);
    }
}
