//! Calls in both directions on one TCP connection: the server sends
//! calls (NFSv4.1 callbacks, RFC 8881 §2.10.3.1: the back channel may
//! share the client's fore-channel connection) on a connection a client
//! opened, and the client answers them there.
//!
//! With record marking (RFC 5531 §11) nothing but the message itself
//! tells the directions apart: its `msg_type` (RFC 5531 §9), CALL or
//! REPLY, read by [`classify`]. The server side of a connection keeps a
//! [`ClientCore`] for its own calls ([`TcpBackchannel`]), matching
//! replies by xid; a REPLY no call waits for (a late one, or one the
//! client made up) is dropped and trips `tcp.unexpected_reply`, and a
//! record that is neither trips `tcp.garbage_record`.
//!
//! A client that never answers holds the server's calls: at most
//! [`MAX_REVERSE_IN_FLIGHT`] go out at once, at most [`MAX_REVERSE_WAITERS`]
//! more wait for one of those to end (one more fails at once with
//! [`RpcError::TooManyInFlight`], limit `tcp.reverse_waiters`), and each
//! call, waiting included, ends after `TcpConfig::reverse_reply_wait`
//! ([`RpcError::TimedOut`], limit `tcp.reverse_reply_wait`), whatever
//! bound its caller keeps or forgets to keep.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use bytes::Bytes;
use tokio::sync::{mpsc, oneshot, Semaphore, SemaphorePermit, TryAcquireError};
use xdr::XdrBuf;

use super::QueuedReply;
use crate::client::{ClientConfig, ClientCore, ClientTransport, RpcCall, RpcError};
use crate::limits::{Limit, Waiters};
use crate::msg::{parse_prefix, MsgType};

/// Reverse-direction calls one connection carries at once; a session's
/// back channel (`ca_maxrequests`) is bounded below this by its user.
pub const MAX_REVERSE_IN_FLIGHT: usize = 64;

/// Reverse-direction calls that may wait, per connection, for one of the
/// [`MAX_REVERSE_IN_FLIGHT`] to end.
pub const MAX_REVERSE_WAITERS: usize = 4 * MAX_REVERSE_IN_FLIGHT;

/// How long a reverse-direction call waits for its reply by default
/// (`TcpConfig::reverse_reply_wait`), its wait to go out included.
pub const DEFAULT_REVERSE_REPLY_WAIT: Duration = Duration::from_secs(30);

static UNEXPECTED_REPLY: Limit = Limit::new("tcp.unexpected_reply");
static GARBAGE: Limit = Limit::new("tcp.garbage_record");
static WAITERS: Limit = Limit::new("tcp.reverse_waiters");
static REPLY_WAIT: Limit = Limit::new("tcp.reverse_reply_wait");

/// The direction of a received record (RFC 5531 §9 `msg_type`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Direction {
    /// A call (msg_type CALL).
    Call,
    /// A reply (msg_type REPLY) to the call with this xid.
    Reply(u32),
    /// Shorter than xid and msg_type, or another msg_type.
    Garbage,
}

/// Which way `record` goes, from its first eight bytes.
pub fn classify(record: &[u8]) -> Direction {
    match parse_prefix(record) {
        Ok((_, MsgType::CALL)) => Direction::Call,
        Ok((xid, MsgType::REPLY)) => Direction::Reply(xid),
        _ => Direction::Garbage,
    }
}

/// What a server connection's writer sends: replies to the client's
/// calls, and the server's own calls.
pub(super) enum Outgoing {
    Reply(QueuedReply),
    Call(XdrBuf),
}

type Pending = oneshot::Sender<Result<Bytes, RpcError>>;

struct RevState {
    core: ClientCore<Pending>,
    /// The connection's writer; `None` once the connection ended.
    out: Option<mpsc::UnboundedSender<Outgoing>>,
}

struct Reverse {
    conn_id: u64,
    state: Mutex<RevState>,
    slots: Semaphore,
    /// Calls waiting for one of `slots`.
    waiting: Waiters,
    /// How long a call waits for its reply, its wait for a slot included.
    reply_wait: Duration,
    /// Set once a reverse call went out: the connection carries a back
    /// channel (an idle timeout should spare it).
    used: AtomicBool,
}

impl Reverse {
    fn lock(&self) -> MutexGuard<'_, RevState> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }
}

/// The server's side of the reverse direction of one TCP connection: an
/// [`ClientTransport`] whose calls go to the client on the connection it
/// opened, at most [`MAX_REVERSE_IN_FLIGHT`] at once (at most
/// [`MAX_REVERSE_WAITERS`] more wait), each for its reply at most
/// `TcpConfig::reverse_reply_wait`.
#[derive(Clone)]
pub struct TcpBackchannel {
    inner: Arc<Reverse>,
}

impl core::fmt::Debug for TcpBackchannel {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.debug_struct("TcpBackchannel")
            .field("conn_id", &self.inner.conn_id)
            .finish()
    }
}

/// Forgets a call whose caller stopped waiting (a timeout above), so its
/// late reply counts as unexpected and the table does not grow.
struct Forget<'a> {
    rev: &'a Reverse,
    xid: u32,
}

impl Drop for Forget<'_> {
    fn drop(&mut self) {
        self.rev.lock().core.cancel(self.xid);
    }
}

impl TcpBackchannel {
    pub(super) fn new(
        conn_id: u64,
        out: mpsc::UnboundedSender<Outgoing>,
        xid_seed: u32,
        reply_wait: Duration,
    ) -> Self {
        let config = ClientConfig {
            max_in_flight: MAX_REVERSE_IN_FLIGHT,
            ..ClientConfig::default()
        };
        Self {
            inner: Arc::new(Reverse {
                conn_id,
                state: Mutex::new(RevState {
                    core: ClientCore::new(xid_seed, config),
                    out: Some(out),
                }),
                slots: Semaphore::new(MAX_REVERSE_IN_FLIGHT),
                waiting: Waiters::new(),
                reply_wait,
                used: AtomicBool::new(false),
            }),
        }
    }

    /// The connection's id, as services see it in
    /// [`crate::PeerInfo::conn_id`].
    pub fn conn_id(&self) -> u64 {
        self.inner.conn_id
    }

    /// Whether a reverse call has gone out on the connection (it carries
    /// a back channel: an idle timeout should not close it).
    pub fn in_use(&self) -> bool {
        self.inner.used.load(Ordering::Relaxed)
    }

    /// Reverse calls waiting for their reply.
    pub fn in_flight(&self) -> usize {
        self.inner.lock().core.in_flight()
    }

    /// Reverse calls waiting to go out (all [`MAX_REVERSE_IN_FLIGHT`]
    /// are in flight).
    pub fn waiting(&self) -> usize {
        self.inner.waiting.count()
    }

    async fn call_inner(&self, call: RpcCall) -> Result<Bytes, RpcError> {
        let wait = self.inner.reply_wait;
        match tokio::time::timeout(wait, self.call_unbounded(call)).await {
            Ok(r) => r,
            Err(_) => {
                REPLY_WAIT.trip(format_args!(
                    "connection {}: a call to the client got no reply within {wait:?}",
                    self.inner.conn_id
                ));
                Err(RpcError::TimedOut)
            }
        }
    }

    /// A slot for one call in flight, waiting while all are taken unless
    /// [`MAX_REVERSE_WAITERS`] wait already.
    async fn slot(&self) -> Result<SemaphorePermit<'_>, RpcError> {
        let rev = &self.inner;
        match rev.slots.try_acquire() {
            Ok(p) => Ok(p),
            Err(TryAcquireError::Closed) => Err(RpcError::ConnectionClosed),
            Err(TryAcquireError::NoPermits) => {
                let Some(_counted) = rev.waiting.enter(MAX_REVERSE_WAITERS) else {
                    WAITERS.trip(format_args!(
                        "connection {}: {MAX_REVERSE_IN_FLIGHT} calls to the client in \
                         flight and {MAX_REVERSE_WAITERS} waiting; one more refused",
                        rev.conn_id
                    ));
                    return Err(RpcError::TooManyInFlight);
                };
                rev.slots
                    .acquire()
                    .await
                    .map_err(|_| RpcError::ConnectionClosed)
            }
        }
    }

    async fn call_unbounded(&self, call: RpcCall) -> Result<Bytes, RpcError> {
        let _slot = self.slot().await?;
        let (xid, rx) = {
            let mut st = self.inner.lock();
            let Some(out) = st.out.clone() else {
                return Err(RpcError::ConnectionClosed);
            };
            let (tx, rx) = oneshot::channel();
            let (xid, msg) = st
                .core
                .start_call(&call, tx, Instant::now())
                .map_err(|(_, e)| e)?;
            if out.send(Outgoing::Call(msg)).is_err() {
                st.core.cancel(xid);
                return Err(RpcError::ConnectionClosed);
            }
            (xid, rx)
        };
        self.inner.used.store(true, Ordering::Relaxed);
        let _forget = Forget {
            rev: &self.inner,
            xid,
        };
        rx.await.unwrap_or(Err(RpcError::ConnectionClosed))
    }

    /// Hands a received REPLY to the call waiting for it; one nobody
    /// waits for is dropped and counted.
    pub(super) fn on_reply(&self, record: &Bytes, xid: u32) {
        let done = self.inner.lock().core.handle_reply(record);
        match done {
            Some((_, tx, result)) => {
                let _ = tx.send(result);
            }
            None => UNEXPECTED_REPLY.trip(format_args!(
                "connection {}: dropped a REPLY (xid {xid:#x}) no call waits for",
                self.inner.conn_id
            )),
        }
    }

    /// The connection ended: every waiting call fails, new ones too.
    pub(super) fn close(&self) {
        let failed = {
            let mut st = self.inner.lock();
            st.out = None;
            st.core.fail_all(RpcError::ConnectionClosed)
        };
        for (tx, e) in failed {
            let _ = tx.send(Err(e));
        }
    }
}

/// Counts a record that is neither a call nor a reply.
pub(super) fn garbage(conn_id: u64, len: usize) {
    GARBAGE.trip(format_args!(
        "connection {conn_id}: dropped a {len}-byte record that is neither CALL nor REPLY"
    ));
}

impl ClientTransport for TcpBackchannel {
    fn call(
        &self,
        call: RpcCall,
    ) -> impl core::future::Future<Output = Result<Bytes, RpcError>> + Send {
        self.call_inner(call)
    }
}

/// The reverse directions of a listener's live connections, by
/// connection id (share one between listeners with
/// [`super::TcpServer::with_backchannels`]).
#[derive(Clone, Default)]
pub struct TcpBackchannels {
    map: Arc<Mutex<HashMap<u64, TcpBackchannel>>>,
}

impl core::fmt::Debug for TcpBackchannels {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.debug_struct("TcpBackchannels")
            .field("connections", &self.lock().len())
            .finish()
    }
}

impl TcpBackchannels {
    /// An empty registry.
    pub fn new() -> Self {
        Self::default()
    }

    fn lock(&self) -> MutexGuard<'_, HashMap<u64, TcpBackchannel>> {
        self.map.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// The reverse direction of connection `conn_id` while it is open.
    pub fn get(&self, conn_id: u64) -> Option<TcpBackchannel> {
        self.lock().get(&conn_id).cloned()
    }

    /// Ids of the open connections, lowest first.
    pub fn conn_ids(&self) -> Vec<u64> {
        let mut v: Vec<u64> = self.lock().keys().copied().collect();
        v.sort_unstable();
        v
    }

    pub(super) fn insert(&self, bc: TcpBackchannel) {
        self.lock().insert(bc.conn_id(), bc);
    }

    pub(super) fn remove(&self, conn_id: u64) {
        if let Some(bc) = self.lock().remove(&conn_id) {
            bc.close();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::msg::{Accepted, CallHeader, OpaqueAuth, ReplyHeader};
    use xdr::Encode;

    #[test]
    fn classify_tells_calls_replies_and_garbage_apart() {
        let call = CallHeader {
            xid: 7,
            prog: 1,
            vers: 1,
            proc_: 0,
            cred: OpaqueAuth::NONE,
            verf: OpaqueAuth::NONE,
        };
        let mut b = XdrBuf::new();
        call.encode(&mut b);
        assert_eq!(classify(&b.to_bytes()), Direction::Call);
        let mut r = XdrBuf::new();
        ReplyHeader::accepted(9, Accepted::Success).encode(&mut r);
        assert_eq!(classify(&r.to_bytes()), Direction::Reply(9));
        assert_eq!(classify(&[0, 0, 0, 1]), Direction::Garbage);
        assert_eq!(classify(&[0, 0, 0, 1, 0, 0, 0, 2]), Direction::Garbage);
    }
}
