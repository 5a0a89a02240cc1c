//! The default software RDMA device: the sans-IO `iwarp` engine driven over
//! tokio TCP sockets, interoperable with Linux `siw`.
//!
//! [`SoftDevice`] implements [`rnic::Device`] with `SocketAddr` addresses:
//!
//! - connection management speaks MPA revision 2 with the RFC 6581 enhanced
//!   set-up (IRD/ORD words) and upper-layer private data (RFC 5044 §7.1);
//! - every remote access is checked through the device's [`rnic::MrTable`],
//!   the same table the loopback device uses;
//! - tagged payload (RDMA Write, Read Response) is read from the socket
//!   straight into the registered region, and Send payload straight into the
//!   posted receive buffer: no staging copy (counted in
//!   [`rnic::PlacementStats`]);
//! - an access error sends a Terminate (RFC 5040 §7.2); a disconnect, a
//!   Terminate or a lost connection flushes every outstanding work request.
//!
//! Two tokio tasks serve each queue pair: one reads and places, one transmits.
//! A post to an idle queue pair (its send completions reaped) writes its
//! FPDUs from the posting task itself, without a task hop; a busy one leaves
//! them to the transmit task, which batches them into one vectored write.
//! The device must be used from within a tokio runtime. Throughput and
//! latency against plain TCP: `cargo bench -p softrnic --bench rnic`
//! (docs/softrnic.md).
#![forbid(unsafe_code)]
#![warn(missing_docs)]

mod ahead;
mod cm;
mod core;
mod outbox;
mod qp;
mod rx;
mod shared;
mod tx;

use std::net::SocketAddr;
use std::sync::atomic::AtomicU32;
use std::sync::Arc;
use std::time::Duration;

use rnic::{CmError, Connected, Device, MrTable, ProtectionDomain, QpConfig};

pub use cm::{SoftListener, SoftRequest};
pub use qp::SoftQp;

/// The default MULPDU: the largest ULPDU Linux `siw` itself sends (it
/// segments to 32762-byte ULPDUs), so a `siw` receiver takes it. MPA has no
/// MULPDU negotiation (RFC 5044 §4.1 leaves it to the sender's knowledge of
/// the path); a larger value halves the per-FPDU work again but is not known
/// to be accepted by every `siw` receiver.
pub const SIW_MULPDU: usize = 32762;

/// The default MULPDU toward a peer whose MPA Request or Reply carried
/// Linux siw's experimental large-FPDU bit (`MPA_RR_FLAG_GSO_EXP`, see
/// [`iwarp::wire::mpa::flags::LARGE_FPDU`]): another softrnic, or a siw
/// with `try_gso` on. Near the 16-bit MPA length limit and a multiple of
/// four (no pad), it halves the FPDUs, and so the system calls, per MiB.
/// Every softrnic frame carries the bit: its receive side takes any ULPDU
/// up to 65535 bytes.
pub const LARGE_MULPDU: usize = 65532;

/// Settings of a [`SoftDevice`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SoftConfig {
    /// Ask for (initiator) or require (responder) MPA CRC32c (RFC 5044 §4.4).
    /// Linux `siw` runs without CRC unless the peer asks.
    pub crc: bool,
    /// Largest inbound RDMA Read depth offered (RFC 6581 IRD).
    pub max_ird: u16,
    /// Largest outbound RDMA Read depth wanted (RFC 6581 ORD).
    pub max_ord: u16,
    /// Largest ULPDU sent (the MULPDU, RFC 5044 §4.1) to a peer that did
    /// not say it takes large FPDUs.
    pub mulpdu: usize,
    /// Largest ULPDU sent to a peer that said it takes large FPDUs
    /// ([`LARGE_MULPDU`]); set it to `mulpdu` to never send larger ones.
    pub large_mulpdu: usize,
    /// Largest message a queue pair accepts for posting.
    pub max_message_size: u32,
    /// How long the MPA Request/Reply exchange may take (initiator side).
    pub mpa_timeout: Duration,
    /// How long a listener waits for a connection's MPA Request before
    /// closing it (RFC 5044 §7.1 leaves the time to the implementation;
    /// a Linux client sends its Request at once, so a few seconds is long).
    pub handshake_timeout: Duration,
    /// MPA handshakes a listener runs at once; one more closes the oldest
    /// in progress (limit `mpa.handshakes`), so silent connections from
    /// many addresses cannot lock real clients out.
    pub max_handshakes: usize,
    /// MPA handshakes a listener runs at once for one client address, so
    /// silent connections from one client cannot take every handshake
    /// slot (limit `mpa.handshakes_per_client`).
    pub max_handshakes_per_client: usize,
    /// After an accepted MPA Reply, how long the initiator waits before the
    /// connection is handed over (and so before its first FPDU), unless the
    /// responder sends first. Linux `siw` as responder (6.1) switches the
    /// socket to the queue pair only after sending its Reply, and an FPDU
    /// arriving in that window sits unprocessed
    /// (shared/kpeer/README.md, bug B); 200 ms covers it under emulation.
    /// Zero disables the wait.
    pub first_send_delay: Duration,
    /// Bytes a queue pair's receive side reads from its socket in one
    /// system call beyond the payload it can place directly: the rest of
    /// the stream waiting there (trailers, headers, whole later FPDUs) is
    /// deframed from this buffer, its payload copied to its place. Larger
    /// means fewer system calls per byte; raised to [`MIN_RX_STAGE`] (a
    /// 4 KiB Send whole in one read). Each queue pair holds one buffer of
    /// this size while it runs.
    pub rx_stage: usize,
}

/// The default [`SoftConfig::rx_stage`]: 256 KiB, four 64 KiB FPDUs per
/// read (docs/softrnic.md, "One read per wake-up").
pub const RX_STAGE: usize = 256 * 1024;

/// The smallest [`SoftConfig::rx_stage`]: an untagged FPDU with 4 KiB of
/// payload (an RPC-over-RDMA inline message) and the next FPDU's header.
pub const MIN_RX_STAGE: usize = rx::SMALL_FPDU + rx::LOOKAHEAD;

impl Default for SoftConfig {
    fn default() -> Self {
        SoftConfig {
            crc: false,
            max_ird: 16,
            max_ord: 16,
            mulpdu: SIW_MULPDU,
            large_mulpdu: LARGE_MULPDU,
            max_message_size: 1 << 30,
            mpa_timeout: Duration::from_secs(10),
            handshake_timeout: Duration::from_secs(5),
            max_handshakes: 128,
            max_handshakes_per_client: 8,
            first_send_delay: Duration::from_millis(200),
            rx_stage: RX_STAGE,
        }
    }
}

/// The software iWARP device.
#[derive(Clone, Debug)]
pub struct SoftDevice {
    inner: Arc<DeviceInner>,
}

#[derive(Debug)]
struct DeviceInner {
    table: Arc<MrTable>,
    io: Arc<outbox::IoCounters>,
    cfg: SoftConfig,
    next_qp: AtomicU32,
}

impl SoftDevice {
    /// A device with its own region table; `seed` drives STag keys.
    pub fn new(cfg: SoftConfig, seed: u64) -> Self {
        SoftDevice {
            inner: Arc::new(DeviceInner {
                table: MrTable::new(seed),
                io: Arc::default(),
                cfg,
                next_qp: AtomicU32::new(1),
            }),
        }
    }

    /// The device's settings.
    pub fn config(&self) -> &SoftConfig {
        &self.inner.cfg
    }

    /// FPDU write system calls made on all the device's connections (a
    /// vectored write counts once): with [`QueuePair::post_chain`], the
    /// Writes and the Send of one small reply cost one.
    ///
    /// [`QueuePair::post_chain`]: rnic::QueuePair::post_chain
    pub fn socket_writes(&self) -> u64 {
        self.inner
            .io
            .socket_writes
            .load(std::sync::atomic::Ordering::Relaxed)
    }
}

impl Device for SoftDevice {
    type Addr = SocketAddr;
    type Qp = SoftQp;
    type Listener = SoftListener;

    fn mr_table(&self) -> &Arc<MrTable> {
        &self.inner.table
    }

    async fn listen(&self, addr: &SocketAddr) -> Result<SoftListener, CmError> {
        cm::listen(self.clone(), *addr).await
    }

    async fn connect(
        &self,
        pd: &ProtectionDomain,
        addr: &SocketAddr,
        config: QpConfig,
    ) -> Result<Connected<SoftQp>, CmError> {
        cm::connect(self, pd, *addr, config).await
    }
}
