//! The TCP shell (feature `tokio`): RPC over TCP with record marking
//! (RFC 5531 §11), driving the sans-IO [`Server`] and [`ClientCore`].

use std::io;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, Weak};
use std::time::{Duration, Instant};

use bytes::Bytes;
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite};
use tokio::net::tcp::OwnedReadHalf;
use tokio::net::{TcpListener, TcpStream, ToSocketAddrs};
use tokio::sync::{mpsc, oneshot, Notify, OwnedSemaphorePermit, Semaphore};
use tokio::task::JoinHandle;
use xdr::XdrBuf;

use crate::client::{
    CallSigner, CallTimeout, ClientConfig, ClientCore, ClientTransport, RpcCall, RpcError,
};
use crate::limits::{Backoff, ConnLimiter, ConnLimits, Limit, Refused};
use crate::record::RecordDecoder;
use crate::server::{PeerInfo, Server, TransportKind};

mod budget;
mod receive;
mod reverse;
mod tls;
mod write;

pub use budget::ServerReplyBudget;
use budget::{Charge, ReplyBudget};
use receive::RecordRoom;
pub use receive::ServerReceiveBudget;
use reverse::Outgoing;
pub use reverse::{
    classify, Direction, TcpBackchannel, TcpBackchannels, DEFAULT_REVERSE_REPLY_WAIT,
    MAX_REVERSE_IN_FLIGHT, MAX_REVERSE_WAITERS,
};
use tls::Upgraded;
pub use tls::{ClientTls, ServerTls, DEFAULT_HANDSHAKE_TIMEOUT};
use write::{reply_writer, writer_task, RecordWrite};

/// Settings of the TCP shells.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TcpConfig {
    /// Largest record accepted; a peer exceeding it is disconnected.
    pub max_record: usize,
    /// Calls executed concurrently per connection (server side), counting
    /// each until its reply is written.
    pub max_concurrent_per_conn: usize,
    /// Bytes reserved for each socket read.
    pub read_chunk: usize,
    /// Bytes of replies one server connection may hold: replies waiting to
    /// be written plus [`Self::reply_reserve`] per call running. While they
    /// are spent the connection starts no call and reads nothing, so a
    /// client that does not read its replies is pushed back on by TCP flow
    /// control instead of growing the server's memory. Trips the
    /// `tcp.queued_reply_bytes` limit when the replies already made and
    /// not yet written (not the reservations of calls running) keep a new
    /// call from starting.
    pub max_queued_reply_bytes: usize,
    /// Bytes a call is charged while it runs, before its reply's size is
    /// known: the largest reply expected (an NFS READ of 1 MiB and its
    /// header), or less where the service bounds the reply from the
    /// call's arguments ([`crate::RpcService::reply_size_bound`]: a 4 KiB
    /// READ reserves about 4 KiB). A larger reply is charged at its real
    /// size once ready.
    pub reply_reserve: usize,
    /// Bytes of replies all connections of a server may hold together
    /// (each call charges its connection's budget, then this one). A
    /// connection holding nothing may always start one call, so the server
    /// holds at most this plus one reply per connection; otherwise a call
    /// waits (and its connection is not read) until bytes are freed. Trips
    /// the `tcp.server_reply_bytes` limit. Read by [`TcpServer::bind`];
    /// share one [`ServerReplyBudget`] between listeners with
    /// [`TcpServer::with_reply_budget`].
    pub max_server_reply_bytes: usize,
    /// How long a server connection may stay silent (no byte received)
    /// with no call running and no reply waiting to be written before it
    /// is closed, freeing its place under the connection caps; `None`
    /// keeps idle connections forever. A connection a service still holds
    /// ([`crate::RpcService::holds_connection`]: an NFSv4.1 session bound
    /// to it, which callbacks may use) is kept. Default 6 minutes, as the
    /// Linux server (`svc_age_temp_xprts`, every `svc_conn_age_period`).
    /// Trips the `tcp.idle_closed` limit.
    pub idle_timeout: Option<Duration>,
    /// Bytes of room all connections of a server may make for records
    /// ahead of their bytes' arrival. A record longer than 64 KiB is read
    /// into room made for its whole length when its header arrives, not
    /// moved as its buffer grows; a peer's header claims the length, so
    /// the room is charged here until the record is complete or the
    /// connection ends. The buffers such records were received into are
    /// kept for reuse (up to [`crate::record::MAX_SPARES`] per
    /// connection) and charged here too, for as long as they are kept.
    /// Past it a record is received as it arrives and spares are let go
    /// (no call is refused or delayed), and the `tcp.receive_reserve_bytes`
    /// limit trips. Read by [`TcpServer::bind`]; share one
    /// [`ServerReceiveBudget`] between listeners with
    /// [`TcpServer::with_receive_budget`].
    pub max_server_receive_reserve: usize,
    /// How long a call the server makes to a client on the client's
    /// connection (an NFSv4.1 callback, [`TcpBackchannel`]) waits for its
    /// reply, its wait to go out included; then it fails with
    /// [`crate::client::RpcError::TimedOut`] and trips the
    /// `tcp.reverse_reply_wait` limit. Default 30 s
    /// ([`DEFAULT_REVERSE_REPLY_WAIT`]), above the NFSv4.1
    /// server's own 5 s callback bound.
    pub reverse_reply_wait: Duration,
}

impl Default for TcpConfig {
    fn default() -> Self {
        Self {
            max_record: 4 * 1024 * 1024 + 64 * 1024,
            max_concurrent_per_conn: 128,
            read_chunk: 64 * 1024,
            max_queued_reply_bytes: 8 * 1024 * 1024,
            reply_reserve: 1024 * 1024 + 4096,
            max_server_reply_bytes: 256 * 1024 * 1024,
            idle_timeout: Some(Duration::from_secs(6 * 60)),
            max_server_receive_reserve: 64 * 1024 * 1024,
            reverse_reply_wait: reverse::DEFAULT_REVERSE_REPLY_WAIT,
        }
    }
}

/// A reply ready to be written, with what it holds of its connection's
/// call slots and reply budget (both freed once it is written).
type QueuedReply = (XdrBuf, Charge, OwnedSemaphorePermit);

static ACCEPT_FAILED: Limit = Limit::new("tcp.accept_failed");
static CONNS_TOTAL: Limit = Limit::new("tcp.connections");
static CONNS_PER_CLIENT: Limit = Limit::new("tcp.connections_per_client");
static IDLE_CLOSED: Limit = Limit::new("tcp.idle_closed");
static CALLS_PER_CONN: Limit = Limit::new("tcp.calls_per_conn");

/// An RPC server over TCP serving a [`Server`]'s programs.
#[derive(Debug)]
pub struct TcpServer {
    listener: TcpListener,
    server: Arc<Server>,
    config: TcpConfig,
    conns: Arc<ConnLimiter>,
    replies: Arc<ServerReplyBudget>,
    receives: Arc<ServerReceiveBudget>,
    backchannels: TcpBackchannels,
    tls: Option<Arc<ServerTls>>,
}

impl TcpServer {
    /// Binds `addr`, admitting connections within [`ConnLimits::default`]
    /// (see [`Self::with_conn_limiter`]).
    pub async fn bind(
        addr: impl ToSocketAddrs,
        server: Arc<Server>,
        config: TcpConfig,
    ) -> io::Result<Self> {
        Ok(Self {
            listener: TcpListener::bind(addr).await?,
            server,
            config,
            conns: ConnLimiter::new(ConnLimits::default()),
            replies: ServerReplyBudget::new(config.max_server_reply_bytes),
            receives: ServerReceiveBudget::new(config.max_server_receive_reserve),
            backchannels: TcpBackchannels::new(),
            tls: None,
        })
    }

    /// Offers RPC-over-TLS (RFC 9289) on this listener: a connection whose
    /// first record is an AUTH_TLS probe is answered STARTTLS and upgraded
    /// to TLS; the others are served as plain RPC, as before. The calls
    /// of each connection carry its [`crate::TransportSecurity`].
    pub fn with_tls(mut self, tls: ServerTls) -> Self {
        self.tls = Some(Arc::new(tls));
        self
    }

    /// Registers this listener's connections in `backchannels` (share
    /// one registry between listeners).
    pub fn with_backchannels(mut self, backchannels: TcpBackchannels) -> Self {
        self.backchannels = backchannels;
        self
    }

    /// The reverse direction of each open connection: how the server
    /// sends calls (NFSv4.1 callbacks) to a client on its connection.
    pub fn backchannels(&self) -> TcpBackchannels {
        self.backchannels.clone()
    }

    /// Charges this listener's replies to `replies` (share one budget
    /// between listeners to bound their replies together).
    pub fn with_reply_budget(mut self, replies: Arc<ServerReplyBudget>) -> Self {
        self.replies = replies;
        self
    }

    /// The reply bytes this listener's connections hold (with those of
    /// any listener sharing the budget).
    pub fn reply_budget(&self) -> Arc<ServerReplyBudget> {
        Arc::clone(&self.replies)
    }

    /// Charges the room this listener's connections make for records
    /// ahead of their arrival to `receives` (share one budget between
    /// listeners to bound it for all).
    pub fn with_receive_budget(mut self, receives: Arc<ServerReceiveBudget>) -> Self {
        self.receives = receives;
        self
    }

    /// The room for records this listener's connections have made ahead
    /// of their arrival (with that of any listener sharing the budget).
    pub fn receive_budget(&self) -> Arc<ServerReceiveBudget> {
        Arc::clone(&self.receives)
    }

    /// Counts this listener's connections in `conns` (share one limiter
    /// between listeners to cap their connections together).
    pub fn with_conn_limiter(mut self, conns: Arc<ConnLimiter>) -> Self {
        self.conns = conns;
        self
    }

    /// The bound address.
    pub fn local_addr(&self) -> io::Result<SocketAddr> {
        self.listener.local_addr()
    }

    /// Accepts connections forever, each served by its own task.
    ///
    /// A failed accept (no file descriptor left, a connection aborted
    /// before it was accepted, no kernel memory) trips the
    /// `tcp.accept_failed` limit and is retried after a pause of 10 ms
    /// doubling to 500 ms: the listener never ends on its own. A connection
    /// over the total or per-client cap is closed at once.
    pub async fn serve(self) -> io::Result<()> {
        let mut backoff = Backoff::accept();
        loop {
            match self.listener.accept().await {
                Ok((stream, addr)) => {
                    backoff.succeeded();
                    self.admit(stream, addr);
                }
                Err(e) => {
                    let pause = backoff.failed();
                    ACCEPT_FAILED.trip(format_args!(
                        "accept on {}: {e}; retrying in {pause:?}",
                        self.listener
                            .local_addr()
                            .map_or_else(|_| "?".into(), |a| a.to_string())
                    ));
                    tokio::time::sleep(pause).await;
                }
            }
        }
    }

    fn admit(&self, stream: TcpStream, addr: SocketAddr) {
        let slot = match self.conns.admit(addr.ip()) {
            Ok(slot) => slot,
            Err(refused) => {
                let limit = match refused {
                    Refused::Total { .. } => &CONNS_TOTAL,
                    Refused::PerClient { .. } => &CONNS_PER_CLIENT,
                };
                limit.trip(format_args!("closed a connection from {addr}: {refused}"));
                return;
            }
        };
        let server = Arc::clone(&self.server);
        let config = self.config;
        let replies = Arc::clone(&self.replies);
        let receives = Arc::clone(&self.receives);
        let bcs = self.backchannels.clone();
        let tls = self.tls.clone();
        tokio::spawn(async move {
            let conn = Conn {
                server,
                config,
                replies,
                receives,
                bcs: &bcs,
            };
            match tls {
                None => conn.plain(stream, Some(addr)).await,
                Some(tls) => {
                    let _ = stream.set_nodelay(true);
                    match tls::accept(stream, Some(addr), &tls, config.idle_timeout).await {
                        Upgraded::Plain(stream) => conn.plain(stream, Some(addr)).await,
                        Upgraded::Tls(stream, security) => {
                            let (r, w) = tokio::io::split(*stream);
                            let peer = new_peer(Some(addr), security);
                            conn.split(TlsRead(r), w, peer).await;
                        }
                        Upgraded::Idle => IDLE_CLOSED.trip(format_args!(
                            "closed connection from {addr}: sent nothing in {:?}",
                            config.idle_timeout.unwrap_or_default()
                        )),
                        Upgraded::Closed => {}
                    }
                }
            }
            drop(slot);
        });
    }

    /// Runs [`Self::serve`] on a new task.
    pub fn spawn(self) -> JoinHandle<io::Result<()>> {
        tokio::spawn(self.serve())
    }
}

/// Serves one connection: reads records within the bound, executes up to
/// `max_concurrent_per_conn` calls at once and writes replies in
/// completion order. A record over the bound closes the connection. While
/// the replies it holds exceed `max_queued_reply_bytes` it starts no call
/// and reads nothing (see [`TcpConfig::max_queued_reply_bytes`]); the
/// same while the server's `replies` are spent and this connection holds
/// some of them (see [`TcpConfig::max_server_reply_bytes`]).
pub async fn serve_connection(
    stream: TcpStream,
    addr: Option<SocketAddr>,
    server: Arc<Server>,
    config: TcpConfig,
    replies: Arc<ServerReplyBudget>,
) {
    let bcs = TcpBackchannels::new();
    let conn = Conn {
        server,
        config,
        replies,
        receives: ServerReceiveBudget::new(config.max_server_receive_reserve),
        bcs: &bcs,
    };
    conn.plain(stream, addr).await;
}

/// A new connection's identity for the services.
fn new_peer(addr: Option<SocketAddr>, security: crate::TransportSecurity) -> PeerInfo {
    PeerInfo {
        conn_id: crate::server::next_conn_id(),
        addr,
        transport: TransportKind::Tcp,
        security,
    }
}

/// What serving one connection needs from its listener.
struct Conn<'a> {
    server: Arc<Server>,
    config: TcpConfig,
    replies: Arc<ServerReplyBudget>,
    receives: Arc<ServerReceiveBudget>,
    /// The connection's reverse direction is in here while it is open:
    /// REPLY records go to the server's own calls ([`TcpBackchannel`]),
    /// CALL records to `server`.
    bcs: &'a TcpBackchannels,
}

impl Conn<'_> {
    /// Serves a plain TCP connection.
    async fn plain(self, stream: TcpStream, addr: Option<SocketAddr>) {
        let _ = stream.set_nodelay(true);
        let peer = new_peer(addr, crate::TransportSecurity::None);
        let (r, w) = stream.into_split();
        self.split(r, w, peer).await;
    }

    /// Serves a connection from its two halves.
    async fn split<R: ConnRead, W: RecordWrite + 'static>(self, mut r: R, w: W, peer: PeerInfo) {
        let (tx, rx) = mpsc::unbounded_channel::<Outgoing>();
        let writer = tokio::spawn(reply_writer(w, rx));
        let seed = (peer.conn_id as u32).wrapping_mul(0x9e37_79b9);
        let reverse = TcpBackchannel::new(
            peer.conn_id,
            tx.clone(),
            seed,
            self.config.reverse_reply_wait,
        );
        self.bcs.insert(reverse.clone());
        let (server, config, replies) = (self.server, self.config, self.replies);
        let room = RecordRoom::new(self.receives, peer.conn_id);
        let clean = serve_records(&mut r, &peer, server, config, replies, room, &reverse, tx).await;
        self.bcs.remove(peer.conn_id);
        reverse.close();
        if !clean {
            writer.abort();
        }
        let _ = writer.await;
    }
}

/// The receiving half of a server connection: plain TCP or TLS.
trait ConnRead: Send {
    /// Reads what has arrived into `deframer`; false at end of stream or
    /// on error. Dropping the future loses no byte.
    fn read_some(
        &mut self,
        deframer: &mut RecordDecoder,
        chunk: usize,
    ) -> impl core::future::Future<Output = bool> + Send;
}

impl ConnRead for OwnedReadHalf {
    fn read_some(
        &mut self,
        deframer: &mut RecordDecoder,
        chunk: usize,
    ) -> impl core::future::Future<Output = bool> + Send {
        read_some(self, deframer, chunk)
    }
}

/// The receiving half of a TLS connection.
struct TlsRead(tokio::io::ReadHalf<tokio_rustls::server::TlsStream<TcpStream>>);

impl ConnRead for TlsRead {
    /// Decrypted bytes are read into a buffer grown as for plain TCP;
    /// `read_buf` is cancel-safe, and what rustls decrypted but did not
    /// hand out yet stays in its session.
    async fn read_some(&mut self, deframer: &mut RecordDecoder, chunk: usize) -> bool {
        grow(deframer, chunk);
        let buf = deframer.read_buf();
        matches!(self.0.read_buf(buf).await, Ok(n) if n > 0)
    }
}

/// The read loop of a server connection: false when it ends on a record
/// over the bound (pending replies are not written then).
#[allow(clippy::too_many_arguments)]
async fn serve_records<R: ConnRead>(
    r: &mut R,
    peer: &PeerInfo,
    server: Arc<Server>,
    config: TcpConfig,
    replies: Arc<ServerReplyBudget>,
    mut room: RecordRoom,
    reverse: &TcpBackchannel,
    tx: mpsc::UnboundedSender<Outgoing>,
) -> bool {
    let peer = *peer;
    let permits = Arc::new(Semaphore::new(config.max_concurrent_per_conn.max(1)));
    let budget = ReplyBudget::new(config.max_queued_reply_bytes, replies, peer.conn_id);
    let mut deframer = RecordDecoder::new(config.max_record);
    let mut turn = 0usize;
    loop {
        let record = match deframer.next_record() {
            Ok(Some(record)) => {
                room.record_done();
                record
            }
            Ok(None) => {
                room.prepare(&mut deframer);
                let idle = Idle {
                    timeout: config.idle_timeout,
                    permits: &permits,
                    max: config.max_concurrent_per_conn.max(1),
                    server: &server,
                    peer: &peer,
                    reverse,
                };
                if !read_or_idle(r, &mut deframer, config.read_chunk, &idle).await {
                    break;
                }
                continue;
            }
            Err(e) => {
                tracing::info!(conn = peer.conn_id, error = %e, "closing connection");
                return false;
            }
        };
        match classify(&record) {
            Direction::Call => {}
            Direction::Reply(xid) => {
                reverse.on_reply(&record, xid);
                continue;
            }
            Direction::Garbage => {
                reverse::garbage(peer.conn_id, record.len());
                continue;
            }
        }
        let permit = match Arc::clone(&permits).try_acquire_owned() {
            Ok(p) => p,
            Err(tokio::sync::TryAcquireError::Closed) => break,
            Err(tokio::sync::TryAcquireError::NoPermits) => {
                CALLS_PER_CONN.trip(format_args!(
                    "connection {}: {} calls running; reading waits for one to end",
                    peer.conn_id, config.max_concurrent_per_conn
                ));
                let Ok(p) = Arc::clone(&permits).acquire_owned().await else {
                    break;
                };
                p
            }
        };
        let accepted = server.accept(&record, &peer);
        let reserve = accepted
            .reply_bound()
            .map_or(config.reply_reserve, |n| n.min(config.reply_reserve));
        let mut charge = budget.charge(reserve).await;
        let server = Arc::clone(&server);
        let tx = tx.clone();
        let mut call = Box::pin(async move {
            if let Some(reply) = server.execute(accepted).await {
                charge.settle(reply.len());
                let _ = tx.send(Outgoing::Reply((reply, charge, permit)));
            }
        });
        // The call starts here, before the next record is read, so the
        // service sees the connection's calls begin in arrival order (a
        // spawned task may run after one spawned later); it runs on once
        // it first waits.
        let first = std::future::poll_fn(|cx| {
            std::task::Poll::Ready(std::future::Future::poll(call.as_mut(), cx))
        });
        if first.await.is_pending() {
            tokio::spawn(call);
        }
        turn += 1;
        if turn >= CALLS_PER_TURN {
            turn = 0;
            tokio::task::yield_now().await;
        }
    }
    true
}

/// Calls a connection starts before its task yields to the others. A
/// call that never waits (a cached NFS READ) runs whole on the
/// connection's task, so without turns a client pipelining such calls
/// keeps the worker for as long as tokio's cooperative budget lasts
/// (about 380 calls measured) before another connection's call is
/// looked at; `yield_now` also lets the runtime poll the sockets.
const CALLS_PER_TURN: usize = 32;

/// What decides whether a silent server connection is idle.
struct Idle<'a> {
    timeout: Option<Duration>,
    /// The connection's call slots: all free when no call runs and no
    /// reply waits to be written.
    permits: &'a Semaphore,
    max: usize,
    server: &'a Server,
    peer: &'a PeerInfo,
    /// The connection's reverse direction: idle only without callbacks
    /// waiting for their replies.
    reverse: &'a TcpBackchannel,
}

impl Idle<'_> {
    /// Nothing in progress and no service holds the connection.
    fn is_idle(&self) -> bool {
        self.permits.available_permits() >= self.max
            && !self.server.holds_connection(self.peer.conn_id)
            && self.reverse.in_flight() == 0
    }
}

/// [`read_some`], closing the connection (false) once it has been silent
/// for `idle.timeout` while idle ([`Idle::is_idle`]); a silent connection
/// that is not idle then gets another period.
async fn read_or_idle<R: ConnRead>(
    r: &mut R,
    deframer: &mut RecordDecoder,
    chunk: usize,
    idle: &Idle<'_>,
) -> bool {
    let Some(timeout) = idle.timeout else {
        return r.read_some(deframer, chunk).await;
    };
    loop {
        // `read_some` may be dropped at its await points: it only reads
        // with `try_read_buf` (or TLS's cancel-safe `read_buf`), so no
        // received byte is lost.
        if let Ok(more) = tokio::time::timeout(timeout, r.read_some(deframer, chunk)).await {
            return more;
        }
        if idle.is_idle() {
            IDLE_CLOSED.trip(format_args!(
                "closed connection {} from {}: idle for {timeout:?}",
                idle.peer.conn_id,
                idle.peer.addr.map_or_else(|| "?".into(), |a| a.to_string())
            ));
            return false;
        }
    }
}

/// Smallest room made in a connection's receive buffer for a read.
const MIN_READ: usize = 4096;

/// Makes room in the receive buffer for a read when less than
/// [`MIN_READ`] is left and the fragment being received does not fit in
/// what is left (room made for a whole record is not grown again: growing
/// would copy the record).
fn grow(deframer: &mut RecordDecoder, chunk: usize) {
    let missing = deframer.fragment_missing();
    let buf = deframer.read_buf();
    let spare = buf.capacity() - buf.len();
    if spare < MIN_READ && missing.is_none_or(|m| m > spare) {
        buf.reserve(buf.len().clamp(MIN_READ, chunk.max(MIN_READ)));
    }
}

/// Reads what the socket has into the deframer. The buffer grows with what
/// has arrived (room for as many bytes again, from 4 KiB up to `chunk`),
/// so a peer that sends a few bytes and falls silent costs a few KiB, not
/// `chunk`, and nothing is reserved while it is silent. False at end of
/// stream or on error.
async fn read_some(r: &OwnedReadHalf, deframer: &mut RecordDecoder, chunk: usize) -> bool {
    loop {
        if r.readable().await.is_err() {
            return false;
        }
        grow(deframer, chunk);
        let buf = deframer.read_buf();
        match r.try_read_buf(buf) {
            Ok(0) => return false,
            Ok(_) => return true,
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => continue,
            Err(_) => return false,
        }
    }
}

type Pending = oneshot::Sender<Result<Bytes, RpcError>>;

/// Client reconnection: after the connection fails, up to `max_attempts`
/// reconnects are tried `delay` apart, and every call in flight is sent
/// again with its original XID so the server's duplicate-request cache can
/// recognise it (RFC 5531 §8: the XID identifies the transaction).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct ReconnectPolicy {
    /// Reconnection attempts after a failure (0: never reconnect).
    pub max_attempts: u32,
    /// Pause before each attempt.
    pub delay: Duration,
}

struct ClientShared {
    core: Mutex<ClientCore<Pending>>,
    tx: Mutex<Option<mpsc::Sender<XdrBuf>>>,
    slots: Semaphore,
    call_timeout: Option<Duration>,
    /// Set (before pending calls are failed) when the client gave up on
    /// the connection for good.
    closed: AtomicBool,
    /// Woken by a call that finds no connection, after the server closed
    /// an idle one (see [`TcpClient`]).
    wanted: Notify,
}

impl ClientShared {
    fn lock(&self) -> std::sync::MutexGuard<'_, ClientCore<Pending>> {
        self.core.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn sender(&self) -> Option<mpsc::Sender<XdrBuf>> {
        self.tx.lock().unwrap_or_else(|p| p.into_inner()).clone()
    }

    fn set_sender(&self, tx: Option<mpsc::Sender<XdrBuf>>) {
        *self.tx.lock().unwrap_or_else(|p| p.into_inner()) = tx;
    }
}

/// An RPC client over TCP with many calls in flight on one connection: a
/// writer task sends calls, a reader task matches replies by XID.
///
/// When the connection fails, the [`ReconnectPolicy`] decides whether to
/// reconnect and resend the calls in flight with their XIDs; otherwise (or
/// once attempts are exhausted) every pending call ends with
/// [`RpcError::ConnectionClosed`]. A connection the server closes while no
/// call is in flight (servers close idle connections, e.g. Linux's after
/// 6 minutes) is not a failure: with a policy allowing reconnects, the
/// client reconnects when the next call needs it, with fresh attempts.
/// Dropping the last clone closes the connection.
#[derive(Clone)]
pub struct TcpClient {
    shared: Arc<ClientShared>,
    reader: Arc<JoinHandle<()>>,
}

impl core::fmt::Debug for TcpClient {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.debug_struct("TcpClient").finish_non_exhaustive()
    }
}

impl Drop for TcpClient {
    fn drop(&mut self) {
        if Arc::strong_count(&self.reader) == 1 {
            self.reader.abort();
        }
    }
}

/// Calls the server sends on a client's connection at once (the client
/// answers them with its callback [`Server`]); beyond it they are
/// dropped and trip `tcp.client_callbacks`.
pub const MAX_CALLBACKS_PER_CONN: usize = 64;

static CLIENT_CALLBACKS: Limit = Limit::new("tcp.client_callbacks");

/// The program a client serves on its own connection (the NFSv4.1
/// callback program, RFC 8881 §2.10.3.1, §20).
#[derive(Clone)]
struct CallbackService {
    server: Arc<Server>,
    peer: PeerInfo,
    running: Arc<Semaphore>,
}

impl CallbackService {
    /// Runs one call from the server and sends its reply on the
    /// connection the call came on.
    fn serve(&self, record: Bytes, shared: &ClientShared) {
        let Ok(permit) = Arc::clone(&self.running).try_acquire_owned() else {
            CLIENT_CALLBACKS.trip(format_args!(
                "dropped a call from the server: {MAX_CALLBACKS_PER_CONN} running"
            ));
            return;
        };
        let Some(sender) = shared.sender() else {
            return;
        };
        let (server, peer) = (Arc::clone(&self.server), self.peer);
        tokio::spawn(async move {
            if let Some(reply) = server.handle_call(record, &peer).await {
                let _ = sender.send(reply).await;
            }
            drop(permit);
        });
    }
}

/// Reads replies until the connection ends; false if the client is gone.
/// Calls from the server go to `callbacks`, or are dropped without one.
async fn read_replies(
    r: &mut BoxRead,
    weak: &Weak<ClientShared>,
    max_record: usize,
    read_chunk: usize,
    callbacks: Option<&CallbackService>,
) -> bool {
    let mut deframer = RecordDecoder::new(max_record);
    loop {
        reserve_for_reply(&mut deframer, read_chunk);
        match r.read_buf(deframer.read_buf()).await {
            Ok(0) | Err(_) => return true,
            Ok(_) => {}
        }
        loop {
            match deframer.next_record() {
                Ok(Some(rec)) => {
                    let Some(shared) = weak.upgrade() else {
                        return false;
                    };
                    if classify(&rec) == Direction::Call {
                        match callbacks {
                            Some(cb) => cb.serve(rec, &shared),
                            None => tracing::debug!("call from the server dropped"),
                        }
                        continue;
                    }
                    let done = shared.lock().handle_reply(&rec);
                    match done {
                        Some((_, tx, result)) => {
                            let _ = tx.send(result);
                        }
                        None => tracing::debug!("reply with unknown xid dropped"),
                    }
                }
                Ok(None) => break,
                Err(e) => {
                    tracing::info!(error = %e, "server sent an oversized record");
                    return true;
                }
            }
        }
    }
}

/// Makes room before a read on a client connection: for the whole rest of
/// a large reply whose fragment header has arrived (a 1 MiB READ reply is
/// then read into place, not moved as the buffer grows: the server side's
/// [`RecordRoom`] for the client), else `read_chunk`. The length is the
/// server's claim, bounded by the client's own `max_record` (a larger
/// claim fails the connection at [`RecordDecoder::next_record`]); a
/// connection holds one record, so this is at most the room the record
/// would take anyway once its bytes arrived.
fn reserve_for_reply(deframer: &mut RecordDecoder, read_chunk: usize) {
    match deframer.fragment_missing() {
        Some(missing) if missing > receive::SMALL_RECORD => deframer.reserve_input(missing),
        _ => deframer.read_buf().reserve(read_chunk),
    }
}

fn open_writer(w: BoxWrite, depth: usize) -> (mpsc::Sender<XdrBuf>, JoinHandle<()>) {
    let (tx, rx) = mpsc::channel::<XdrBuf>(depth.max(1));
    (tx, tokio::spawn(writer_task(w, rx)))
}

/// The receiving half of a client connection, plain or TLS.
type BoxRead = Box<dyn AsyncRead + Send + Unpin>;
/// The sending half of a client connection, plain or TLS.
type BoxWrite = Box<dyn AsyncWrite + Send + Unpin>;

/// Opens a connection to `addr`; with `tls`, probes with AUTH_TLS (xid
/// `xid`) and runs the TLS handshake on it (RFC 9289 §4.1).
async fn dial(
    addr: SocketAddr,
    tls: Option<&ClientTls>,
    xid: u32,
) -> io::Result<(BoxRead, BoxWrite)> {
    let stream = TcpStream::connect(addr).await?;
    let _ = stream.set_nodelay(true);
    Ok(match tls {
        None => {
            let (r, w) = stream.into_split();
            (Box::new(r), Box::new(w))
        }
        Some(tls) => {
            let (r, w) = tokio::io::split(tls.connect(stream, xid).await?);
            (Box::new(r), Box::new(w))
        }
    })
}

impl TcpClient {
    /// Connects to `addr`. `xid_seed` is the first XID (inject a random
    /// value in production). If `config.retransmit.timeout` is set, a call
    /// without a reply by then is sent again with the same XID, up to
    /// `max_retransmits` times, and then fails with [`RpcError::TimedOut`].
    pub async fn connect(
        addr: SocketAddr,
        xid_seed: u32,
        config: ClientConfig,
        tcp: TcpConfig,
    ) -> io::Result<Self> {
        Self::connect_with(addr, xid_seed, config, tcp, ReconnectPolicy::default()).await
    }

    /// Like [`Self::connect`], with a reconnection policy.
    pub async fn connect_with(
        addr: SocketAddr,
        xid_seed: u32,
        config: ClientConfig,
        tcp: TcpConfig,
        reconnect: ReconnectPolicy,
    ) -> io::Result<Self> {
        Self::open(addr, xid_seed, config, tcp, reconnect, None, None).await
    }

    /// Like [`Self::connect_with`], over RPC-over-TLS (RFC 9289): each
    /// connection (the first and every reconnection) starts with the
    /// AUTH_TLS probe and the TLS handshake, and fails when the server
    /// does not answer STARTTLS; the client never falls back to plain RPC.
    pub async fn connect_tls(
        addr: SocketAddr,
        xid_seed: u32,
        config: ClientConfig,
        tcp: TcpConfig,
        reconnect: ReconnectPolicy,
        tls: ClientTls,
    ) -> io::Result<Self> {
        let tls = Some(Arc::new(tls));
        Self::open(addr, xid_seed, config, tcp, reconnect, None, tls).await
    }

    /// Like [`Self::connect`], answering the calls the server sends on
    /// this connection (its back channel, RFC 8881 §2.10.3.1) with
    /// `callbacks`, at most [`MAX_CALLBACKS_PER_CONN`] at once. The
    /// services see the calls as from [`TransportKind::Tcp`] connection
    /// `conn_id` of the server's address.
    pub async fn connect_with_backchannel(
        addr: SocketAddr,
        xid_seed: u32,
        config: ClientConfig,
        tcp: TcpConfig,
        callbacks: Arc<Server>,
    ) -> io::Result<Self> {
        let policy = ReconnectPolicy::default();
        Self::connect_with_backchannel_and(addr, xid_seed, config, tcp, callbacks, policy).await
    }

    /// Like [`Self::connect_with_backchannel`], with a reconnection
    /// policy: each new connection answers the server's calls too.
    pub async fn connect_with_backchannel_and(
        addr: SocketAddr,
        xid_seed: u32,
        config: ClientConfig,
        tcp: TcpConfig,
        callbacks: Arc<Server>,
        reconnect: ReconnectPolicy,
    ) -> io::Result<Self> {
        let cb = CallbackService {
            server: callbacks,
            peer: PeerInfo {
                conn_id: crate::server::next_conn_id(),
                addr: Some(addr),
                transport: TransportKind::Tcp,
                security: crate::TransportSecurity::None,
            },
            running: Arc::new(Semaphore::new(MAX_CALLBACKS_PER_CONN)),
        };
        Self::open(addr, xid_seed, config, tcp, reconnect, Some(cb), None).await
    }

    async fn open(
        addr: SocketAddr,
        xid_seed: u32,
        config: ClientConfig,
        tcp: TcpConfig,
        reconnect: ReconnectPolicy,
        callbacks: Option<CallbackService>,
        tls: Option<Arc<ClientTls>>,
    ) -> io::Result<Self> {
        // The probe's xid is one the core will not use for a while.
        let probe_xid = xid_seed.wrapping_sub(1);
        let (mut r, w) = dial(addr, tls.as_deref(), probe_xid).await?;
        let depth = config.max_in_flight;
        let (tx, mut writer) = open_writer(w, depth);
        let shared = Arc::new(ClientShared {
            core: Mutex::new(ClientCore::new(xid_seed, config)),
            tx: Mutex::new(Some(tx)),
            slots: Semaphore::new(config.max_in_flight.max(1)),
            call_timeout: config.retransmit.timeout,
            closed: AtomicBool::new(false),
            wanted: Notify::new(),
        });
        let weak = Arc::downgrade(&shared);
        let reader = tokio::spawn(async move {
            let mut attempts = 0u32;
            'conn: loop {
                let cb = callbacks.as_ref();
                if !read_replies(&mut r, &weak, tcp.max_record, tcp.read_chunk, cb).await {
                    writer.abort();
                    return;
                }
                writer.abort();
                let Some(shared) = weak.upgrade() else {
                    return;
                };
                shared.set_sender(None);
                if reconnect.max_attempts > 0 && shared.lock().in_flight() == 0 {
                    // Closed with nothing in flight (a server closes idle
                    // connections): no failure, so reconnect only when a
                    // call needs the connection, with fresh attempts.
                    // (Dropping the last client aborts this task.)
                    shared.wanted.notified().await;
                    attempts = 0;
                }
                while attempts < reconnect.max_attempts {
                    attempts += 1;
                    tokio::time::sleep(reconnect.delay).await;
                    let Ok((nr, nw)) = dial(addr, tls.as_deref(), probe_xid).await else {
                        continue;
                    };
                    tracing::info!(%addr, attempts, "reconnected; resending calls in flight");
                    let (tx, nwriter) = open_writer(nw, depth);
                    r = nr;
                    writer = nwriter;
                    let resend = shared.lock().retransmit_all(Instant::now());
                    shared.set_sender(Some(tx.clone()));
                    for (_, msg) in resend {
                        if tx.send(msg).await.is_err() {
                            break;
                        }
                    }
                    continue 'conn;
                }
                shared.closed.store(true, Ordering::SeqCst);
                let failed = shared.lock().fail_all(RpcError::ConnectionClosed);
                for (tx, e) in failed {
                    let _ = tx.send(Err(e));
                }
                return;
            }
        });
        Ok(Self {
            shared,
            reader: Arc::new(reader),
        })
    }

    /// Calls in flight.
    pub fn in_flight(&self) -> usize {
        self.shared.lock().in_flight()
    }

    async fn do_call(
        &self,
        call: RpcCall,
        signer: Option<Arc<dyn CallSigner>>,
    ) -> Result<Bytes, RpcError> {
        let _slot = self
            .shared
            .slots
            .acquire()
            .await
            .map_err(|_| RpcError::ConnectionClosed)?;
        let (tx, rx) = oneshot::channel();
        let (xid, msg) = self
            .shared
            .lock()
            .start_call_signed(&call, signer, tx, Instant::now())
            .map_err(|(_, e)| e)?;
        if self.shared.closed.load(Ordering::SeqCst) {
            self.shared.lock().cancel(xid);
            return Err(RpcError::ConnectionClosed);
        }
        // While reconnecting there is no sender: the call stays in the
        // table and is sent by the reconnection's resend.
        match self.shared.sender() {
            Some(sender) => {
                if sender.send(msg).await.is_err() {
                    tracing::debug!(xid, "connection lost while sending; awaiting resend");
                }
            }
            // Possibly closed while idle: have the reader reconnect.
            None => self.shared.wanted.notify_one(),
        }
        let Some(timeout) = self.shared.call_timeout else {
            return rx.await.unwrap_or(Err(RpcError::ConnectionClosed));
        };
        let mut rx = rx;
        loop {
            match tokio::time::timeout(timeout, &mut rx).await {
                Ok(r) => return r.unwrap_or(Err(RpcError::ConnectionClosed)),
                Err(_) => {
                    let action = self.shared.lock().call_timed_out(xid, Instant::now());
                    match action {
                        CallTimeout::Retransmit(msg) => {
                            tracing::debug!(xid, "retransmitting with the same XID");
                            if let Some(sender) = self.shared.sender() {
                                let _ = sender.send(msg).await;
                            }
                        }
                        CallTimeout::Failed(_) => return Err(RpcError::TimedOut),
                        // The reply is being delivered right now.
                        CallTimeout::NotInFlight => {}
                    }
                }
            }
        }
    }
}

impl ClientTransport for TcpClient {
    fn call(
        &self,
        call: RpcCall,
    ) -> impl core::future::Future<Output = Result<Bytes, RpcError>> + Send {
        self.do_call(call, None)
    }

    fn call_signed(
        &self,
        call: RpcCall,
        signer: Arc<dyn CallSigner>,
    ) -> impl core::future::Future<Output = Result<Bytes, RpcError>> + Send {
        self.do_call(call, Some(signer))
    }
}

impl ClientTransport for Arc<TcpClient> {
    fn call(
        &self,
        call: RpcCall,
    ) -> impl core::future::Future<Output = Result<Bytes, RpcError>> + Send {
        self.as_ref().do_call(call, None)
    }

    fn call_signed(
        &self,
        call: RpcCall,
        signer: Arc<dyn CallSigner>,
    ) -> impl core::future::Future<Output = Result<Bytes, RpcError>> + Send {
        self.as_ref().do_call(call, Some(signer))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::record::fragment_header;

    #[test]
    fn a_large_reply_gets_room_for_all_of_it_a_small_one_a_read_chunk() {
        let mut d = RecordDecoder::new(2 << 20);
        d.feed(&fragment_header(1 << 20, true));
        d.feed(&[0; 100]);
        reserve_for_reply(&mut d, 4096);
        assert!(d.read_buf().capacity() >= (1 << 20) + 4);
        let mut d = RecordDecoder::new(2 << 20);
        d.feed(&fragment_header(1000, true));
        reserve_for_reply(&mut d, 4096);
        assert!(d.read_buf().capacity() < 64 * 1024);
        // A claim past the client's own bound gets no room: the next
        // record read fails the connection instead.
        let mut d = RecordDecoder::new(1 << 20);
        d.feed(&fragment_header(4 << 20, true));
        reserve_for_reply(&mut d, 4096);
        assert!(d.read_buf().capacity() < 64 * 1024);
        assert!(d.next_record().is_err());
    }
}
