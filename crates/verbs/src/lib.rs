//! The `rnic::Device` for RDMA NICs: RoCE, InfiniBand and iWARP adapters,
//! and the Linux kernel's software devices `rxe` (soft-RoCE) and `siw`
//! (soft-iWARP), through rdma-core (libibverbs + librdmacm).
//!
//! # The binding
//!
//! rdma-core is loaded at run time (`dlopen` of `libibverbs.so.1` and
//! `librdmacm.so.1` through the `libloading` crate), so the workspace builds
//! on any machine and a missing rdma-core is a typed error at
//! [`VerbsDevice::open`], not a link failure. The `sideway` crate (0.4.3)
//! was the suggested binding; it was not taken because its safe API lacks
//! what RPC-over-RDMA needs (private data in `rdma_connect`/`rdma_accept`
//! and in connection events, Send With Invalidate, the invalidated rkey of
//! a receive completion, registration at a chosen IOVA), and its raw layer
//! (`rdma-mummy-sys`) builds a C shim with cmake and generates bindings
//! with bindgen/libclang at build time, neither of which the project's
//! machines have. The few rdma-core structures used are declared in one
//! module, `sys`, the only place in the workspace with `unsafe` code, each
//! block with a SAFETY note; their sizes and offsets are pinned by a test.
//!
//! # What the device does
//!
//! - Memory: the device's [`rnic::MrTable`] carries a
//!   [`rnic::RegionBackend`] that registers every region with the NIC
//!   (at the memory's own address, the base it advertises: siw ignores a
//!   chosen IOVA) and advertises the NIC's rkey as the region's STag. Ownership is the same as on
//!   softrnic: the table keeps the buffer until invalidation, and the NIC
//!   registration is dropped (`ibv_dereg_mr`, synchronous) before the owner
//!   gets it back (RFC 8166 §3.4.3 fencing).
//! - Send, Send With Invalidate (RFC 5040 §5.3, RFC 8267 §4), RDMA Write and
//!   RDMA Read; the invalidated STag of an inbound Send With Invalidate is
//!   reported in the receive completion.
//! - Completion queues: one per queue pair, with its own completion channel
//!   whose descriptor wakes a tokio task (`AsyncFd`): no busy polling.
//! - Connection management with rdma_cm, including RFC 8797 private data
//!   (at most 255 bytes, rdma_cm's limit) and IRD/ORD.
//!
//! Not supported: remote invalidation of this device's own regions (user
//! memory registered with `ibv_reg_mr` is not remotely invalidatable on every
//! provider, rxe refuses it), so clients on this device do not offer Send
//! With Invalidate; fast registration work requests (FRWR is a kernel
//! verb; user space registers with `ibv_reg_mr`, a system call per region);
//! memory windows; shared receive queues. See docs/verbs.md.
#![warn(missing_docs)]

mod backend;
mod cm;
mod conn;
mod sys;

use std::net::{IpAddr, SocketAddr};
use std::sync::Arc;

use rnic::{
    CloseReason, CmError, CompletionQueue, Connected, Device, MrTable, PdId, PostError,
    ProtectionDomain, QpAttrs, QpConfig, QpNum, QpState, QueuePair, ReadWr, RecvWr, SendWr,
    WriteWr,
};

pub use cm::{VerbsListener, VerbsRequest};
pub use conn::SEND_SLOT;
pub use sys::{DeviceInfo, TransportKind};

/// The advice every "no verbs device" error ends with.
pub const USE_SOFT: &str =
    "use --rdma-device soft (or ?device=soft) for the software iWARP device, which needs no RDMA hardware";

/// Why a verbs device cannot be used.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum DeviceError {
    /// rdma-core's libraries are not installed.
    #[error("rdma-core is not installed ({0}); install rdma-core (libibverbs1, librdmacm1) or {USE_SOFT}")]
    NotInstalled(String),
    /// rdma-core sees no device of that name.
    #[error("no RDMA device {name:?} (rdma-core sees: {seen}); {USE_SOFT}")]
    NoDevice {
        /// The name asked for.
        name: String,
        /// The devices it does see, comma-separated, or "none".
        seen: String,
    },
}

/// Every device rdma-core sees (`nfsrdma devices`).
pub fn devices() -> Result<Vec<DeviceInfo>, DeviceError> {
    sys::list_devices().map_err(DeviceError::NotInstalled)
}

/// The verbs device whose network interface owns `ip` (rdma_cm binds a
/// specific address to the device of its netdev or GID), if rdma-core is
/// installed and one does. A wildcard or loopback address names no device
/// (rdma_cm would bind loopback to any device).
pub fn device_for_addr(ip: IpAddr) -> Option<String> {
    if ip.is_unspecified() || ip.is_loopback() || sys::available().is_err() {
        return None;
    }
    let ch = sys::EventChannel::new().ok()?;
    let id = sys::CmId::new(&ch).ok()?;
    id.bind(&SocketAddr::new(ip, 0)).ok()?;
    id.device_name()
}

/// The verbs device rdma_cm would use to reach `ip` (address resolution
/// through the routing table), if rdma-core is installed and one does.
/// Waits at most about 1.5 s; a loopback address names no device.
pub fn device_for_peer(ip: IpAddr) -> Option<String> {
    if ip.is_unspecified() || ip.is_loopback() || sys::available().is_err() {
        return None;
    }
    let ch = sys::EventChannel::new().ok()?;
    let id = sys::CmId::new(&ch).ok()?;
    id.resolve_addr(&SocketAddr::new(ip, 1), 1000).ok()?;
    let deadline = std::time::Instant::now() + std::time::Duration::from_millis(1500);
    while std::time::Instant::now() < deadline {
        if let Some(ev) = ch.next() {
            return match ev.kind {
                sys::CmEventKind::AddrResolved => id.device_name(),
                _ => None,
            };
        }
        std::thread::sleep(std::time::Duration::from_millis(10));
    }
    None
}

pub(crate) struct DevInner {
    ctx: sys::Context,
    info: DeviceInfo,
    table: Arc<MrTable>,
    backend: Arc<backend::Backend>,
}

/// An RDMA NIC through rdma-core. Cheap to clone (a handle).
#[derive(Clone)]
pub struct VerbsDevice {
    inner: Arc<DevInner>,
}

impl std::fmt::Debug for VerbsDevice {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("VerbsDevice")
            .field("info", &self.inner.info)
            .finish()
    }
}

impl VerbsDevice {
    /// Opens the device called `name` (`siw0`, `rxe0`, `mlx5_0`); `seed`
    /// seeds the table's own keys (the NIC chooses the STags peers see).
    pub fn open(name: &str, seed: u64) -> Result<Self, DeviceError> {
        sys::available().map_err(DeviceError::NotInstalled)?;
        let (ctx, info) = sys::Context::by_name(name).map_err(|_| DeviceError::NoDevice {
            name: name.to_string(),
            seen: seen(),
        })?;
        let backend = Arc::new(backend::Backend::new(
            ctx,
            info.transport == TransportKind::Iwarp,
        ));
        let table = MrTable::with_backend(
            seed,
            MrTable::DEFAULT_MAX_REGIONS,
            Arc::clone(&backend) as Arc<dyn rnic::RegionBackend>,
        );
        Ok(VerbsDevice {
            inner: Arc::new(DevInner {
                ctx,
                info,
                table,
                backend,
            }),
        })
    }

    /// What rdma-core reports of the device.
    pub fn info(&self) -> &DeviceInfo {
        &self.inner.info
    }
}

fn seen() -> String {
    match sys::list_devices() {
        Ok(l) if !l.is_empty() => l
            .iter()
            .map(|d| d.name.as_str())
            .collect::<Vec<_>>()
            .join(", "),
        _ => "none".into(),
    }
}

impl Device for VerbsDevice {
    type Addr = SocketAddr;
    type Qp = VerbsQp;
    type Listener = VerbsListener;

    fn mr_table(&self) -> &Arc<MrTable> {
        &self.inner.table
    }

    async fn listen(&self, addr: &SocketAddr) -> Result<VerbsListener, CmError> {
        cm::listen(Arc::clone(&self.inner), *addr)
    }

    async fn connect(
        &self,
        pd: &ProtectionDomain,
        addr: &SocketAddr,
        config: QpConfig,
    ) -> Result<Connected<VerbsQp>, CmError> {
        cm::connect(&self.inner, pd, *addr, config).await
    }
}

/// A connected queue pair on the NIC. Dropping it disconnects.
pub struct VerbsQp {
    conn: Arc<conn::Conn>,
}

impl std::fmt::Debug for VerbsQp {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("VerbsQp")
            .field("qp_num", &self.conn.qp_num())
            .field("state", &self.conn.state())
            .finish()
    }
}

impl Drop for VerbsQp {
    fn drop(&mut self) {
        self.conn.close(CloseReason::LocalDisconnect);
        // The completion and CM tasks hold the connection until the NIC has
        // flushed it, and drop it on the blocking pool; so does this
        // handle's clone, should it be the last.
        conn::release(Arc::clone(&self.conn));
    }
}

impl QueuePair for VerbsQp {
    fn qp_num(&self) -> QpNum {
        self.conn.qp_num()
    }

    fn pd(&self) -> PdId {
        self.conn.pd()
    }

    fn state(&self) -> QpState {
        self.conn.state()
    }

    fn close_reason(&self) -> Option<CloseReason> {
        self.conn.close_reason()
    }

    fn attrs(&self) -> QpAttrs {
        self.conn.attrs()
    }

    fn post_send(&self, wr: SendWr) -> Result<(), PostError> {
        self.conn.post_send(wr)
    }

    fn post_write(&self, wr: WriteWr) -> Result<(), PostError> {
        self.conn.post_write(wr)
    }

    fn post_read(&self, wr: ReadWr) -> Result<(), PostError> {
        self.conn.post_read(wr)
    }

    fn post_recv(&self, wr: RecvWr) -> Result<(), PostError> {
        self.conn.post_recv(wr)
    }

    fn send_cq(&self) -> &CompletionQueue {
        self.conn.send_cq()
    }

    fn recv_cq(&self) -> &CompletionQueue {
        self.conn.recv_cq()
    }

    fn disconnect(&self) {
        self.conn.close(CloseReason::LocalDisconnect);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// On a machine without rdma-core, or without an RDMA device (this
    /// one and CI), opening a device is a typed error that says how to use
    /// the software device instead.
    #[test]
    fn a_missing_device_is_a_clear_error_pointing_at_the_software_device() {
        let e = VerbsDevice::open("no-such-rdma-device9", 1).unwrap_err();
        let msg = e.to_string();
        assert!(msg.contains("--rdma-device soft"), "{msg}");
        match e {
            DeviceError::NotInstalled(_) => assert!(devices().is_err()),
            DeviceError::NoDevice { name, .. } => assert_eq!(name, "no-such-rdma-device9"),
        }
        assert_eq!(device_for_addr("0.0.0.0".parse().unwrap()), None);
    }
}
