//! An in-memory RDMA device: two queue pairs in one process, with the same
//! access checks ([`MrTable`]) and the same RNIC behaviour as the real device,
//! plus seeded fault injection for upper-layer tests.
//!
//! Devices attach to a [`LoopbackNetwork`], which maps listener names to
//! listeners. Each device has its own table, like two hosts.
//!
//! ```
//! use rnic::loopback::LoopbackNetwork;
//! use rnic::{Access, Device};
//! use bytes::BytesMut;
//!
//! let net = LoopbackNetwork::new(1);
//! let (server, _client) = (net.device(), net.device());
//! let pd = server.alloc_pd();
//! let mr = pd.register(BytesMut::zeroed(4096), Access::REMOTE_WRITE).unwrap();
//! // Advertise mr.stag() to the peer; take the buffer back when done:
//! let buf = mr.invalidate().buf;
//! assert_eq!(buf.len(), 4096);
//! ```
//!
//! Connection set-up is asynchronous: run [`Device::connect`] on one device and
//! [`Listener::accept_request`] + [`ConnectRequest::accept`] on the other
//! concurrently (see `testkit::conformance::connect_pair`).

mod link;
mod sync;

use std::collections::HashMap;
use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};

use crate::device::{ConnectRequest, Connected, Device, Listener};
use crate::error::CmError;
use crate::mr::{MrTable, ProtectionDomain};
use crate::qp::{QpAttrs, QpConfig, QpState, MAX_PRIVATE_DATA};
use crate::stag::{PdId, QpNum};

pub use link::LoopbackQp;
use link::{FaultState, Link, Side};
use sync::{oneshot, OneshotTx, WaitQueue};

/// Seeded fault injection applied to every connection of a network.
///
/// Send-queue operations (Send, RDMA Write, RDMA Read) are counted per
/// connection; when a fault fires, the operation is not executed, the
/// connection is lost ([`CloseReason::ConnectionLost`](crate::CloseReason)) and
/// every outstanding request on both sides is flushed.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct FaultConfig {
    /// Drop the connection at the first operation after this many.
    pub drop_after_ops: Option<u64>,
    /// Drop the connection at each operation with probability 1/n, drawn from a
    /// generator seeded by the network seed and the connection's number.
    pub drop_one_in: Option<u32>,
}

/// Limits of loopback devices.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct LoopbackConfig {
    /// Largest message size a queue pair accepts.
    pub max_message_size: u32,
    /// Largest IRD/ORD the device supports.
    pub max_rd_atomic: u32,
}

impl Default for LoopbackConfig {
    fn default() -> Self {
        LoopbackConfig {
            max_message_size: 1 << 24,
            max_rd_atomic: 16,
        }
    }
}

struct NetInner {
    seed: u64,
    faults: FaultConfig,
    config: LoopbackConfig,
    listeners: Mutex<HashMap<String, WaitQueue<PendingConnect>>>,
    next_device: AtomicU64,
    next_link: AtomicU64,
    next_name: AtomicU64,
}

impl NetInner {
    fn listeners(&self) -> MutexGuard<'_, HashMap<String, WaitQueue<PendingConnect>>> {
        self.listeners.lock().unwrap_or_else(|e| e.into_inner())
    }
}

/// A namespace of loopback listeners shared by the devices attached to it.
#[derive(Clone)]
pub struct LoopbackNetwork {
    inner: Arc<NetInner>,
}

impl std::fmt::Debug for LoopbackNetwork {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LoopbackNetwork")
            .field("seed", &self.inner.seed)
            .finish()
    }
}

impl LoopbackNetwork {
    /// A network without faults; `seed` drives STag keys and fault draws.
    pub fn new(seed: u64) -> Self {
        Self::with_faults(seed, FaultConfig::default(), LoopbackConfig::default())
    }

    /// A network with fault injection and limits.
    pub fn with_faults(seed: u64, faults: FaultConfig, config: LoopbackConfig) -> Self {
        LoopbackNetwork {
            inner: Arc::new(NetInner {
                seed,
                faults,
                config,
                listeners: Mutex::new(HashMap::new()),
                next_device: AtomicU64::new(1),
                next_link: AtomicU64::new(1),
                next_name: AtomicU64::new(1),
            }),
        }
    }

    /// Attaches a new device (a new host with its own region table).
    pub fn device(&self) -> LoopbackDevice {
        let n = self.inner.next_device.fetch_add(1, Ordering::Relaxed);
        let table = MrTable::new(self.inner.seed ^ n.wrapping_mul(0x9e37_79b9_7f4a_7c15));
        LoopbackDevice {
            net: Arc::clone(&self.inner),
            table,
            next_qp: Arc::new(AtomicU32::new(1)),
        }
    }
}

/// A device on a [`LoopbackNetwork`]. Addresses are listener names; listening
/// on the empty name picks a fresh one.
#[derive(Clone)]
pub struct LoopbackDevice {
    net: Arc<NetInner>,
    table: Arc<MrTable>,
    next_qp: Arc<AtomicU32>,
}

impl std::fmt::Debug for LoopbackDevice {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LoopbackDevice")
            .field("table", &self.table)
            .finish()
    }
}

fn check_private_data(p: &[u8]) -> Result<(), CmError> {
    if p.len() > MAX_PRIVATE_DATA {
        return Err(CmError::PrivateDataTooLong(p.len()));
    }
    Ok(())
}

fn check_pd(table: &Arc<MrTable>, pd: &ProtectionDomain) -> Result<(), CmError> {
    if !Arc::ptr_eq(table, pd.table()) {
        return Err(CmError::Setup(
            "protection domain belongs to another device".into(),
        ));
    }
    Ok(())
}

struct PendingConnect {
    table: Arc<MrTable>,
    pd: PdId,
    qpn: QpNum,
    config: QpConfig,
    reply: OneshotTx<Result<Connected<LoopbackQp>, CmError>>,
}

impl Device for LoopbackDevice {
    type Addr = String;
    type Qp = LoopbackQp;
    type Listener = LoopbackListener;

    fn mr_table(&self) -> &Arc<MrTable> {
        &self.table
    }

    async fn listen(&self, addr: &String) -> Result<LoopbackListener, CmError> {
        let name = if addr.is_empty() {
            format!(
                "loopback-{}",
                self.net.next_name.fetch_add(1, Ordering::Relaxed)
            )
        } else {
            addr.clone()
        };
        let queue = WaitQueue::new();
        {
            let mut map = self.net.listeners();
            if map.contains_key(&name) {
                return Err(CmError::AddrInUse);
            }
            map.insert(name.clone(), queue.clone());
        }
        Ok(LoopbackListener {
            net: Arc::clone(&self.net),
            device: self.clone(),
            name,
            queue,
        })
    }

    async fn connect(
        &self,
        pd: &ProtectionDomain,
        addr: &String,
        config: QpConfig,
    ) -> Result<Connected<LoopbackQp>, CmError> {
        check_pd(&self.table, pd)?;
        check_private_data(&config.private_data)?;
        let queue = self
            .net
            .listeners()
            .get(addr)
            .cloned()
            .ok_or(CmError::Refused)?;
        let (tx, rx) = oneshot();
        let qpn = QpNum(self.next_qp.fetch_add(1, Ordering::Relaxed));
        let pending = PendingConnect {
            table: Arc::clone(&self.table),
            pd: pd.id(),
            qpn,
            config,
            reply: tx,
        };
        if queue.push(pending).is_err() {
            return Err(CmError::Refused);
        }
        rx.await.unwrap_or(Err(CmError::Refused))
    }
}

/// A loopback listener; dropping it refuses pending and later requests.
pub struct LoopbackListener {
    net: Arc<NetInner>,
    device: LoopbackDevice,
    name: String,
    queue: WaitQueue<PendingConnect>,
}

impl std::fmt::Debug for LoopbackListener {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LoopbackListener")
            .field("name", &self.name)
            .finish()
    }
}

impl Listener for LoopbackListener {
    type Addr = String;
    type Qp = LoopbackQp;
    type Request = LoopbackRequest;

    fn local_addr(&self) -> String {
        self.name.clone()
    }

    async fn accept_request(&mut self) -> Result<LoopbackRequest, CmError> {
        match self.queue.pop().await {
            Some(p) => Ok(LoopbackRequest {
                device: self.device.clone(),
                pending: Some(p),
            }),
            None => Err(CmError::ListenerClosed),
        }
    }
}

impl Drop for LoopbackListener {
    fn drop(&mut self) {
        self.net.listeners().remove(&self.name);
        // Dropping the pending requests drops their reply slots: refused.
        drop(self.queue.close());
    }
}

/// A pending loopback connection request.
pub struct LoopbackRequest {
    device: LoopbackDevice,
    pending: Option<PendingConnect>,
}

impl std::fmt::Debug for LoopbackRequest {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LoopbackRequest")
            .field("private_data", &self.private_data())
            .finish()
    }
}

impl ConnectRequest for LoopbackRequest {
    type Qp = LoopbackQp;

    fn private_data(&self) -> &[u8] {
        self.pending
            .as_ref()
            .map(|p| p.config.private_data.as_slice())
            .unwrap_or(&[])
    }

    fn peer_ird_ord(&self) -> (u32, u32) {
        self.pending
            .as_ref()
            .map(|p| (p.config.ird, p.config.ord))
            .unwrap_or((0, 0))
    }

    async fn accept(
        mut self,
        pd: &ProtectionDomain,
        config: QpConfig,
    ) -> Result<LoopbackQp, CmError> {
        check_pd(&self.device.table, pd)?;
        check_private_data(&config.private_data)?;
        let Some(pending) = self.pending.take() else {
            return Err(CmError::Setup("request already answered".into()));
        };
        let net = &self.device.net;
        let limits = net.config;
        let cap = |v: u32| v.min(limits.max_rd_atomic);
        // RFC 6581 §4: each side's ORD is bounded by the other's IRD.
        let c_ord = cap(pending.config.ord).min(cap(config.ird));
        let a_ord = cap(config.ord).min(cap(pending.config.ird));
        let c_attrs = QpAttrs {
            ird: a_ord,
            ord: c_ord,
            max_message_size: limits.max_message_size,
            max_send_wr: pending.config.max_send_wr,
            max_recv_wr: pending.config.max_recv_wr,
        };
        let a_attrs = QpAttrs {
            ird: c_ord,
            ord: a_ord,
            max_message_size: limits.max_message_size,
            max_send_wr: config.max_send_wr,
            max_recv_wr: config.max_recv_wr,
        };
        let a_qpn = QpNum(self.device.next_qp.fetch_add(1, Ordering::Relaxed));
        let link_no = net.next_link.fetch_add(1, Ordering::Relaxed);
        let PendingConnect {
            table: c_table,
            pd: c_pd,
            qpn: c_qpn,
            config: c_cfg,
            reply,
        } = pending;
        let side = |qpn, pd, table, attrs, cfg: QpConfig| Side {
            qpn,
            pd,
            table,
            state: QpState::Rts,
            reason: None,
            attrs,
            send_cq: cfg.send_cq,
            recv_cq: cfg.recv_cq,
            recvs: cfg.initial_recvs.into(),
        };
        let a_private = config.private_data.clone();
        let (a_send, a_recv) = (config.send_cq.clone(), config.recv_cq.clone());
        let (c_send, c_recv) = (c_cfg.send_cq.clone(), c_cfg.recv_cq.clone());
        let link = Arc::new(Mutex::new(Link {
            sides: [
                side(c_qpn, c_pd, c_table, c_attrs, c_cfg),
                side(
                    a_qpn,
                    pd.id(),
                    Arc::clone(&self.device.table),
                    a_attrs,
                    config,
                ),
            ],
            faults: FaultState::new(
                net.faults,
                net.seed ^ link_no.wrapping_mul(0xd1b5_4a32_d192_ed03),
            ),
        }));
        let c_qp = LoopbackQp {
            link: Arc::clone(&link),
            me: 0,
            qpn: c_qpn,
            pd: c_pd,
            attrs: c_attrs,
            send_cq: c_send,
            recv_cq: c_recv,
        };
        let a_qp = LoopbackQp {
            link,
            me: 1,
            qpn: a_qpn,
            pd: pd.id(),
            attrs: a_attrs,
            send_cq: a_send,
            recv_cq: a_recv,
        };
        reply.send(Ok(Connected {
            qp: c_qp,
            private_data: a_private,
        }));
        Ok(a_qp)
    }

    async fn reject(mut self, private_data: &[u8]) -> Result<(), CmError> {
        check_private_data(private_data)?;
        if let Some(p) = self.pending.take() {
            p.reply.send(Err(CmError::Rejected {
                private_data: private_data.to_vec(),
            }));
        }
        Ok(())
    }
}

impl Drop for LoopbackRequest {
    fn drop(&mut self) {
        if let Some(p) = self.pending.take() {
            p.reply.send(Err(CmError::Rejected {
                private_data: Vec::new(),
            }));
        }
    }
}
