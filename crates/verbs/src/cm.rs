//! Connection management over rdma_cm (RDMA_PS_TCP): listening, connection
//! requests with their private data (RFC 8797 for RPC-over-RDMA), accept,
//! reject and connect. Each connection gets its own event channel (an
//! accepted id is migrated off the listener's), read through `AsyncFd`.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use rnic::{CmError, ConnectRequest, Connected, Listener, ProtectionDomain, QpConfig};
use tokio::io::unix::AsyncFd;

use crate::conn::{next_event, Conn};
use crate::sys::{CmEvent, CmEventKind, CmId, EventChannel};
use crate::{DevInner, VerbsQp};

/// How long address and route resolution, and the connection exchange,
/// may take.
const CM_TIMEOUT: Duration = Duration::from_secs(15);
const RESOLVE_MS: i32 = 5000;

fn setup(e: impl std::fmt::Display) -> CmError {
    CmError::Setup(e.to_string())
}

async fn wait(ch: &AsyncFd<EventChannel>) -> Result<CmEvent, CmError> {
    match tokio::time::timeout(CM_TIMEOUT, next_event(ch)).await {
        Ok(Some(ev)) => Ok(ev),
        Ok(None) => Err(setup("rdma_cm event channel failed")),
        Err(_) => Err(setup("rdma_cm timed out")),
    }
}

fn ird_ord(dev: &DevInner, want: u32) -> u8 {
    want.min(dev.info.max_qp_rd_atom.max(1)).min(255) as u8
}

/// A listener on the device: rdma_cm id bound to an address of it.
pub struct VerbsListener {
    dev: Arc<DevInner>,
    // The listening id, kept for its life. Field order is drop order:
    // the id goes before its channel.
    _id: CmId,
    ch: AsyncFd<EventChannel>,
    local: SocketAddr,
}

impl std::fmt::Debug for VerbsListener {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("VerbsListener")
            .field("device", &self.dev.info.name)
            .field("local", &self.local)
            .finish()
    }
}

pub(crate) fn listen(dev: Arc<DevInner>, addr: SocketAddr) -> Result<VerbsListener, CmError> {
    let ch = EventChannel::new().map_err(setup)?;
    let id = CmId::new(&ch).map_err(setup)?;
    id.bind(&addr).map_err(|(errno, msg)| {
        if errno == libc::EADDRINUSE {
            CmError::AddrInUse
        } else {
            setup(msg)
        }
    })?;
    if let Some(name) = id.device_name() {
        if !id.on(dev.ctx) {
            return Err(setup(format!(
                "{addr} belongs to RDMA device {name}, not {}",
                dev.info.name
            )));
        }
    }
    id.listen(128).map_err(|e| setup(e.1))?;
    let local = id.local_addr().unwrap_or(addr);
    let ch = crate::sys::async_fd(ch).map_err(setup)?;
    Ok(VerbsListener {
        dev,
        _id: id,
        ch,
        local,
    })
}

impl Listener for VerbsListener {
    type Addr = SocketAddr;
    type Qp = VerbsQp;
    type Request = VerbsRequest;

    fn local_addr(&self) -> SocketAddr {
        self.local
    }

    async fn accept_request(&mut self) -> Result<VerbsRequest, CmError> {
        loop {
            let ev = next_event(&self.ch).await.ok_or(CmError::ListenerClosed)?;
            let Some(id) = ev.new_id else {
                continue;
            };
            if !id.on(self.dev.ctx) {
                // A wildcard listener hears every device; this one's
                // requests only are served here.
                id.reject(&[]).ok();
                continue;
            }
            return Ok(VerbsRequest {
                dev: Arc::clone(&self.dev),
                peer: id.peer_addr(),
                id: Some(id),
                private_data: ev.private_data,
                peer_ird: u32::from(ev.responder_resources),
                peer_ord: u32::from(ev.initiator_depth),
            });
        }
    }
}

/// A connection request waiting for accept or reject.
pub struct VerbsRequest {
    dev: Arc<DevInner>,
    id: Option<CmId>,
    peer: Option<SocketAddr>,
    private_data: Vec<u8>,
    peer_ird: u32,
    peer_ord: u32,
}

impl std::fmt::Debug for VerbsRequest {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("VerbsRequest")
            .field("peer", &self.peer)
            .field("private_data", &self.private_data.len())
            .finish()
    }
}

impl ConnectRequest for VerbsRequest {
    type Qp = VerbsQp;

    fn private_data(&self) -> &[u8] {
        &self.private_data
    }

    fn peer_ird_ord(&self) -> (u32, u32) {
        (self.peer_ird, self.peer_ord)
    }

    fn peer_addr(&self) -> Option<SocketAddr> {
        self.peer
    }

    async fn accept(self, pd: &ProtectionDomain, config: QpConfig) -> Result<VerbsQp, CmError> {
        let peer = self.peer;
        let r = self.accept_inner(pd, config).await;
        if let Err(e) = &r {
            tracing::warn!(?peer, "accepting an RDMA connection failed: {e}");
        }
        r
    }

    async fn reject(mut self, private_data: &[u8]) -> Result<(), CmError> {
        if private_data.len() > 255 {
            return Err(CmError::PrivateDataTooLong(private_data.len()));
        }
        match self.id.take() {
            Some(id) => id.reject(private_data).map_err(setup),
            None => Ok(()),
        }
    }
}

impl VerbsRequest {
    async fn accept_inner(
        mut self,
        pd: &ProtectionDomain,
        mut config: QpConfig,
    ) -> Result<VerbsQp, CmError> {
        let id = self.id.take().ok_or(CmError::ListenerClosed)?;
        if config.private_data.len() > 255 {
            return Err(CmError::PrivateDataTooLong(config.private_data.len()));
        }
        let ch = EventChannel::new().map_err(setup)?;
        id.migrate(&ch).map_err(|e| setup(e.1))?;
        // Inbound reads are bounded by what the peer will issue (its ORD),
        // outbound by what it accepts (its IRD).
        let ird = ird_ord(&self.dev, config.ird.min(self.peer_ord.max(1)));
        let ord = ird_ord(&self.dev, config.ord.min(self.peer_ird.max(1)));
        let private = std::mem::take(&mut config.private_data);
        let conn = Conn::create(
            &self.dev,
            pd,
            id,
            ch,
            &mut config,
            u32::from(ird),
            u32::from(ord),
        )?;
        conn.id.accept(&private, ird, ord).map_err(setup)?;
        let ev = wait(&conn.cm).await?;
        match ev.kind {
            CmEventKind::Established => {
                conn.established();
                Ok(VerbsQp { conn })
            }
            k => Err(setup(format!(
                "connection not established: {k:?} (status {})",
                ev.status
            ))),
        }
    }
}

impl Drop for VerbsRequest {
    fn drop(&mut self) {
        if let Some(id) = self.id.take() {
            id.reject(&[]).ok();
        }
    }
}

pub(crate) async fn connect(
    dev: &Arc<DevInner>,
    pd: &ProtectionDomain,
    addr: SocketAddr,
    mut config: QpConfig,
) -> Result<Connected<VerbsQp>, CmError> {
    if config.private_data.len() > 255 {
        return Err(CmError::PrivateDataTooLong(config.private_data.len()));
    }
    let ch = crate::sys::async_fd(EventChannel::new().map_err(setup)?).map_err(setup)?;
    let id = CmId::new(ch.get_ref()).map_err(setup)?;
    id.resolve_addr(&addr, RESOLVE_MS).map_err(|e| setup(e.1))?;
    expect(&ch, CmEventKind::AddrResolved, addr).await?;
    if !id.on(dev.ctx) {
        return Err(setup(format!(
            "{addr} is reached through RDMA device {}, not {}",
            id.device_name().unwrap_or_else(|| "(none)".into()),
            dev.info.name
        )));
    }
    id.resolve_route(RESOLVE_MS).map_err(|e| setup(e.1))?;
    expect(&ch, CmEventKind::RouteResolved, addr).await?;
    let ird = ird_ord(dev, config.ird);
    let ord = ird_ord(dev, config.ord);
    let private = std::mem::take(&mut config.private_data);
    let ch = ch.into_inner();
    let conn = Conn::create(dev, pd, id, ch, &mut config, u32::from(ird), u32::from(ord))?;
    conn.id.connect(&private, ird, ord).map_err(setup)?;
    let ev = wait(&conn.cm).await?;
    match ev.kind {
        CmEventKind::Established => {
            conn.established();
            Ok(Connected {
                qp: VerbsQp { conn },
                private_data: ev.private_data,
            })
        }
        CmEventKind::Rejected if !ev.private_data.is_empty() || ev.status == 28 => {
            Err(CmError::Rejected {
                private_data: ev.private_data,
            })
        }
        CmEventKind::Rejected | CmEventKind::Failed => Err(CmError::Refused),
        k => Err(setup(format!(
            "connecting to {addr}: {k:?} (status {})",
            ev.status
        ))),
    }
}

async fn expect(
    ch: &AsyncFd<EventChannel>,
    want: CmEventKind,
    addr: SocketAddr,
) -> Result<(), CmError> {
    let ev = wait(ch).await?;
    if ev.kind == want {
        return Ok(());
    }
    Err(setup(format!(
        "resolving {addr}: {:?} (status {})",
        ev.kind, ev.status
    )))
}
