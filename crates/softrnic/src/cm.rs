//! Connection management over TCP: the MPA Request/Reply exchange
//! (RFC 5044 §7.1) with RFC 6581 enhanced set-up, carrying upper-layer
//! private data both ways and on reject.

use std::collections::VecDeque;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use iwarp::negotiation::{
    Established, FrameReader, Initiator, InitiatorConfig, NegotiationError, ReplyOutcome,
    RequestReceived, ResponderConfig,
};
use limits::{Backoff, ConnLimiter, ConnLimits, Limit};
use rnic::{
    CmError, ConnectRequest, Connected, Listener, ProtectionDomain, QpConfig, MAX_PRIVATE_DATA,
};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::mpsc;
use tokio::task::AbortHandle;
use tokio::time::Instant;

use crate::qp::{self, SoftQp};
use crate::SoftDevice;

fn setup(e: impl std::fmt::Display) -> CmError {
    CmError::Setup(e.to_string())
}

fn check_private_data(p: &[u8]) -> Result<(), CmError> {
    if p.len() > MAX_PRIVATE_DATA {
        return Err(CmError::PrivateDataTooLong(p.len()));
    }
    Ok(())
}

fn check_pd(dev: &SoftDevice, pd: &ProtectionDomain) -> Result<(), CmError> {
    if !Arc::ptr_eq(&dev.inner.table, pd.table()) {
        return Err(CmError::Setup(
            "protection domain belongs to another device".into(),
        ));
    }
    Ok(())
}

fn depth(v: u32, max: u16) -> u16 {
    u16::try_from(v).unwrap_or(u16::MAX).min(max)
}

/// Reads one MPA frame (bounded by [`FrameReader`]: at most 20 + 512 bytes),
/// never reading past its end so that FPDUs that follow stay in the socket.
async fn read_frame(stream: &mut TcpStream) -> Result<Vec<u8>, CmError> {
    let mut reader = FrameReader::new();
    let mut buf = [0u8; 532];
    loop {
        let need = reader.needed().map_err(setup)?;
        let want = need.min(buf.len());
        let Some(chunk) = buf.get_mut(..want) else {
            return Err(CmError::Setup("MPA frame too long".into()));
        };
        let n = stream.read(chunk).await.map_err(setup)?;
        if n == 0 {
            return Err(CmError::Setup(
                "connection closed during MPA exchange".into(),
            ));
        }
        let (_, frame) = reader.feed(&chunk[..n]).map_err(setup)?;
        if let Some(f) = frame {
            return Ok(f);
        }
    }
}

/// Parsed requests waiting for `accept_request`.
const MAX_READY: usize = 64;

static ACCEPT_FAILED: Limit = Limit::new("mpa.accept_failed");
static HANDSHAKES: Limit = Limit::new("mpa.handshakes");
static HANDSHAKES_PER_CLIENT: Limit = Limit::new("mpa.handshakes_per_client");
static HANDSHAKE_TIMEOUT: Limit = Limit::new("mpa.handshake_timeout");

pub(crate) async fn listen(dev: SoftDevice, addr: SocketAddr) -> Result<SoftListener, CmError> {
    let listener = TcpListener::bind(addr).await.map_err(|e| match e.kind() {
        std::io::ErrorKind::AddrInUse => CmError::AddrInUse,
        _ => setup(e),
    })?;
    let local = listener.local_addr().map_err(setup)?;
    let (ready_tx, ready) = mpsc::channel(MAX_READY);
    let cfg = dev.inner.cfg;
    // The total is kept by `in_progress` (oldest closed first).
    let handshakes = ConnLimiter::new(ConnLimits {
        max_total: usize::MAX,
        max_per_client: cfg.max_handshakes_per_client,
    });
    Ok(SoftListener {
        dev,
        listener,
        local,
        ready_tx,
        ready,
        handshakes,
        in_progress: VecDeque::new(),
        backoff: Backoff::accept(),
        paused_until: None,
    })
}

/// Reads and parses one MPA Request within `timeout`. A Request asking for
/// markers is answered with an MPA reject, as Linux `siw` does, and dropped.
async fn handshake(
    mut stream: TcpStream,
    peer: SocketAddr,
    timeout: Duration,
) -> Option<(TcpStream, RequestReceived)> {
    let frame = match tokio::time::timeout(timeout, read_frame(&mut stream)).await {
        Ok(Ok(f)) => f,
        Ok(Err(e)) => {
            tracing::debug!(%peer, error = %e, "dropping connection: bad MPA request");
            return None;
        }
        Err(_) => {
            HANDSHAKE_TIMEOUT.trip(format_args!(
                "closed a connection from {peer}: no MPA Request within {timeout:?}"
            ));
            return None;
        }
    };
    let req = match RequestReceived::parse(&frame) {
        Ok(r) => r,
        Err(e) => {
            tracing::debug!(%peer, error = %e, "dropping connection: bad MPA request");
            return None;
        }
    };
    if req.markers {
        if let Ok(bytes) = req.reject(&[]) {
            let _ = stream.write_all(&bytes).await;
        }
        return None;
    }
    stream.set_nodelay(true).ok()?;
    Some((stream, req))
}

/// Connects: TCP, then the MPA Request with our private data and IRD/ORD;
/// the Reply accepts (its private data is returned) or rejects.
pub(crate) async fn connect(
    dev: &SoftDevice,
    pd: &ProtectionDomain,
    addr: SocketAddr,
    config: QpConfig,
) -> Result<Connected<SoftQp>, CmError> {
    check_pd(dev, pd)?;
    check_private_data(&config.private_data)?;
    let cfg = dev.inner.cfg;
    let mut stream = TcpStream::connect(addr).await.map_err(|e| match e.kind() {
        std::io::ErrorKind::ConnectionRefused => CmError::Refused,
        _ => setup(e),
    })?;
    stream.set_nodelay(true).map_err(setup)?;
    let init = InitiatorConfig {
        crc: cfg.crc,
        ird: depth(config.ird, cfg.max_ird),
        ord: depth(config.ord, cfg.max_ord),
        rtr_offer: Vec::new(),
        private_data: config.private_data.clone(),
        large_fpdu: true,
    };
    let (awaiting, request) = Initiator::start(init).map_err(neg_error)?;
    let exchange = async {
        stream.write_all(&request).await.map_err(setup)?;
        read_frame(&mut stream).await
    };
    let reply = tokio::time::timeout(cfg.mpa_timeout, exchange)
        .await
        .map_err(|_| CmError::Setup("MPA reply timed out".into()))??;
    match awaiting.handle_reply(&reply).map_err(neg_error)? {
        ReplyOutcome::Accepted(est) => {
            if !cfg.first_send_delay.is_zero() {
                // Wait out the responder's switch to RDMA mode (see
                // `SoftConfig::first_send_delay`), or until it sends first.
                let mut probe = [0u8; 1];
                let _ = tokio::time::timeout(cfg.first_send_delay, stream.peek(&mut probe)).await;
            }
            let private_data = est.peer_private_data.clone();
            let qp = qp::start(dev, pd, stream, &est, config);
            Ok(Connected { qp, private_data })
        }
        ReplyOutcome::Rejected { private_data, .. } => Err(CmError::Rejected { private_data }),
    }
}

fn neg_error(e: NegotiationError) -> CmError {
    match e {
        NegotiationError::PrivateDataTooLong(n) => CmError::PrivateDataTooLong(n),
        other => setup(other),
    }
}

/// A TCP listener answering MPA Requests. Each connection's Request is read
/// by its own task (bounded in number and time), so a slow or silent client
/// never holds up the others.
#[derive(Debug)]
pub struct SoftListener {
    dev: SoftDevice,
    listener: TcpListener,
    local: SocketAddr,
    ready_tx: mpsc::Sender<(TcpStream, RequestReceived)>,
    ready: mpsc::Receiver<(TcpStream, RequestReceived)>,
    handshakes: Arc<ConnLimiter>,
    /// Handshake tasks, oldest first.
    in_progress: VecDeque<AbortHandle>,
    backoff: Backoff,
    /// After a failed accept, when to try again.
    paused_until: Option<Instant>,
}

impl SoftListener {
    /// Handles one accept: a failure pauses accepting (10 ms doubling to
    /// 500 ms, limit `mpa.accept_failed`) and never ends the listener; a
    /// connection over the handshake caps is closed at once; the others
    /// get a task reading their MPA Request within `handshake_timeout`.
    fn on_accept(&mut self, accepted: std::io::Result<(TcpStream, SocketAddr)>) {
        let (stream, peer) = match accepted {
            Ok(a) => {
                self.backoff.succeeded();
                a
            }
            Err(e) => {
                let pause = self.backoff.failed();
                ACCEPT_FAILED.trip(format_args!(
                    "accept on {}: {e}; retrying in {pause:?}",
                    self.local
                ));
                self.paused_until = Some(Instant::now() + pause);
                return;
            }
        };
        let slot = match self.handshakes.admit(peer.ip()) {
            Ok(slot) => slot,
            Err(refused) => {
                HANDSHAKES_PER_CLIENT.trip(format_args!(
                    "closed a connection from {peer}: {refused} in MPA handshake"
                ));
                return;
            }
        };
        self.make_room(peer);
        let tx = self.ready_tx.clone();
        let timeout = self.dev.inner.cfg.handshake_timeout;
        let task = tokio::spawn(async move {
            if let Some(done) = handshake(stream, peer, timeout).await {
                let _ = tx.send(done).await;
            }
            drop(slot);
        });
        self.in_progress.push_back(task.abort_handle());
    }

    /// With `max_handshakes` in progress, closes the oldest: a real client
    /// sends its MPA Request right after connecting, so the oldest
    /// handshake is the likeliest to be a silent one, and connections from
    /// many addresses cannot lock real clients out for the timeout.
    fn make_room(&mut self, peer: SocketAddr) {
        self.in_progress.retain(|h| !h.is_finished());
        let max = self.dev.inner.cfg.max_handshakes;
        if self.in_progress.len() < max {
            return;
        }
        if let Some(oldest) = self.in_progress.pop_front() {
            oldest.abort();
        }
        HANDSHAKES.trip(format_args!(
            "{max} MPA handshakes in progress: closed the oldest for one from {peer}"
        ));
    }
}

impl Listener for SoftListener {
    type Addr = SocketAddr;
    type Qp = SoftQp;
    type Request = SoftRequest;

    fn local_addr(&self) -> SocketAddr {
        self.local
    }

    /// Waits for the next well-formed MPA Request. Connections whose Request
    /// is malformed, late (after `handshake_timeout`), or asks for markers
    /// never show up here. A failed accept is retried, never returned.
    async fn accept_request(&mut self) -> Result<SoftRequest, CmError> {
        loop {
            let paused = self.paused_until;
            tokio::select! {
                Some((stream, req)) = self.ready.recv() => {
                    return Ok(SoftRequest { dev: self.dev.clone(), stream: Some(stream), req: Some(req) });
                }
                accepted = self.listener.accept(), if paused.is_none() => self.on_accept(accepted),
                () = tokio::time::sleep_until(paused.unwrap_or_else(Instant::now)), if paused.is_some() => {
                    self.paused_until = None;
                }
            }
        }
    }
}

/// A pending MPA Request; its private data is readable before deciding.
/// Dropping it rejects it without private data (the reject is written by a
/// spawned task, since `Drop` cannot wait).
#[derive(Debug)]
pub struct SoftRequest {
    dev: SoftDevice,
    stream: Option<TcpStream>,
    req: Option<RequestReceived>,
}

impl ConnectRequest for SoftRequest {
    type Qp = SoftQp;

    fn private_data(&self) -> &[u8] {
        self.req
            .as_ref()
            .map(|r| r.private_data.as_slice())
            .unwrap_or(&[])
    }

    /// The connector's TCP address: the NFS duplicate-request cache keys
    /// on its IP part so a retransmission after a reconnect is recognised.
    fn peer_addr(&self) -> Option<std::net::SocketAddr> {
        self.stream.as_ref().and_then(|s| s.peer_addr().ok())
    }

    /// The Request's RFC 6581 words, `(0, 0)` for a revision 1 Request.
    fn peer_ird_ord(&self) -> (u32, u32) {
        self.req
            .as_ref()
            .and_then(|r| r.ird_ord)
            .map(|w| (u32::from(w.ird), u32::from(w.ord)))
            .unwrap_or((0, 0))
    }

    async fn accept(mut self, pd: &ProtectionDomain, config: QpConfig) -> Result<SoftQp, CmError> {
        check_pd(&self.dev, pd)?;
        check_private_data(&config.private_data)?;
        let (Some(mut stream), Some(req)) = (self.stream.take(), self.req.take()) else {
            return Err(CmError::Setup("request already answered".into()));
        };
        let cfg = self.dev.inner.cfg;
        let rc = ResponderConfig {
            crc: cfg.crc,
            ird: depth(config.ird, cfg.max_ird),
            ord: depth(config.ord, cfg.max_ord),
            rtr_support: Vec::new(),
            private_data: config.private_data.clone(),
            large_fpdu: true,
        };
        let (reply, est): (Vec<u8>, Established) = req.accept(&rc).map_err(neg_error)?;
        // Receives are posted before the Reply goes out, so the peer's first
        // Send finds them (RFC 8166 §3.3.1).
        let prepared = qp::prepare(&self.dev, pd, &est, config);
        stream.write_all(&reply).await.map_err(setup)?;
        Ok(qp::launch(prepared, stream))
    }

    async fn reject(mut self, private_data: &[u8]) -> Result<(), CmError> {
        check_private_data(private_data)?;
        let (Some(mut stream), Some(req)) = (self.stream.take(), self.req.take()) else {
            return Err(CmError::Setup("request already answered".into()));
        };
        let bytes = req.reject(private_data).map_err(neg_error)?;
        stream.write_all(&bytes).await.map_err(setup)?;
        stream.shutdown().await.map_err(setup)?;
        Ok(())
    }
}

impl Drop for SoftRequest {
    fn drop(&mut self) {
        let (Some(mut stream), Some(req)) = (self.stream.take(), self.req.take()) else {
            return;
        };
        let Ok(bytes) = req.reject(&[]) else { return };
        if let Ok(rt) = tokio::runtime::Handle::try_current() {
            rt.spawn(async move {
                if stream.write_all(&bytes).await.is_ok() {
                    let _ = stream.shutdown().await;
                }
            });
        }
    }
}
