//! The verbs model of an RDMA NIC: STags, protection domains, memory regions,
//! queue pairs, completions, and an in-memory loopback device.
//!
//! # Layout
//!
//! - [`Stag`], [`Access`], [`PdId`], [`QpNum`]: identifiers and rights
//!   (RFC 5040 §2.1).
//! - [`MrTable`]: the one access-check table every device uses. Consumers reach
//!   it through a [`ProtectionDomain`] and get a [`MemoryRegion`] handle per
//!   registration; the buffer stays with the table until
//!   [`MemoryRegion::invalidate`] hands it back (a Send With Invalidate
//!   revokes access at once; the owner then takes the buffer back the same
//!   way). [`StagSlot::fast_register`] re-registers an index under a fresh key;
//!   [`ProtectionDomain::register_read_only`] exposes shared [`bytes::Bytes`]
//!   to remote reads without a copy.
//! - [`Device`], [`Listener`], [`ConnectRequest`], [`QueuePair`]: the device
//!   contract (connection management with private data, posting, completion
//!   timing, RNIC error behaviour), documented on [`Device`].
//! - [`loopback`]: an in-memory device with seeded fault injection;
//!   the behaviour tests every device must pass are in the dev-only
//!   `testkit` crate (`testkit::conformance`).
//! - [`SendWr`], [`WriteWr`], [`ReadWr`], [`RecvWr`]: work requests;
//!   [`WorkCompletion`] with [`WcStatus`]: their results, queued on a
//!   [`CompletionQueue`] that can be polled or awaited without naming a runtime,
//!   or handed to a consumer's [`CompletionHandler`] where the device produces
//!   them.
//! - [`QpState`] and its transition table ([`QpState::on`]).
//! - Errors: [`AccessError`] (maps to Terminate codes, RFC 5040 §4.8),
//!   [`TerminateCause`], [`PostError`], [`RegisterError`], [`CmError`],
//!   [`CqOverflow`].
//!
//! # Using a device
//!
//! Upper layers are generic over [`Device`]; tests use
//! [`loopback::LoopbackDevice`], production uses `softrnic::SoftDevice`.
//!
//! ```
//! use bytes::{Bytes, BytesMut};
//! use rnic::loopback::LoopbackNetwork;
//! use rnic::*;
//!
//! async fn demo<D: Device>(client: D, server: D, listen_at: D::Addr) {
//!     let (cpd, spd) = (client.alloc_pd(), server.alloc_pd());
//!     let mut listener = server.listen(&listen_at).await.unwrap();
//!     let addr = listener.local_addr();
//!     // The server posts its receive buffers before accepting.
//!     let mut scfg = QpConfig::new(CompletionQueue::new(64));
//!     scfg.initial_recvs = vec![RecvWr { wr_id: 1, buf: BytesMut::with_capacity(1024) }];
//!     scfg.private_data = b"server hello".to_vec();
//!     let mut ccfg = QpConfig::new(CompletionQueue::new(64));
//!     ccfg.private_data = b"client hello".to_vec();
//!     let (c, s) = tokio::join!(client.connect(&cpd, &addr, ccfg), async {
//!         let req = listener.accept_request().await.unwrap();
//!         assert_eq!(req.private_data(), b"client hello"); // seen before deciding
//!         req.accept(&spd, scfg).await
//!     });
//!     let Connected { qp: cqp, private_data } = c.unwrap();
//!     assert_eq!(private_data, b"server hello");
//!     let sqp = s.unwrap();
//!
//!     // The client exposes a reply buffer, the server writes it, then
//!     // invalidates it remotely with its Send.
//!     let reply = cpd.register(BytesMut::zeroed(5), Access::REMOTE_WRITE).unwrap();
//!     cqp.post_recv(RecvWr { wr_id: 2, buf: BytesMut::with_capacity(1024) }).unwrap();
//!     sqp.post_write(WriteWr { wr_id: 3, data: vec![Bytes::from_static(b"hello")],
//!         remote_stag: reply.stag(), remote_to: 0 }).unwrap();
//!     sqp.post_send(SendWr { wr_id: 4, data: vec![Bytes::from_static(b"done")],
//!         solicited: false, invalidate: Some(reply.stag()) }).unwrap();
//!     let wc = loop {
//!         let wc = cqp.recv_cq().next().await.unwrap();
//!         if wc.opcode == WcOpcode::Recv { break wc; }
//!     };
//!     assert_eq!(wc.invalidated, Some(reply.stag()));
//!     // Remotely invalidated: the owner takes the buffer back at once.
//!     assert_eq!(&reply.invalidate().buf[..], b"hello");
//! }
//!
//! let net = LoopbackNetwork::new(7);
//! let rt = tokio::runtime::Builder::new_current_thread().build().unwrap();
//! rt.block_on(demo(net.device(), net.device(), String::new()));
//! ```
#![forbid(unsafe_code)]
#![warn(missing_docs)]

mod cq;
mod device;
mod error;
pub mod loopback;
mod mr;
mod qp;
mod stag;
mod wr;

pub use cq::{CompletionHandler, CompletionQueue, Next};
pub use device::{CloseReason, ConnectRequest, Connected, Device, Listener, QueuePair};
pub use error::{
    AccessError, CmError, CqOverflow, PostError, RegisterError, TerminateCause, WcStatus,
};
pub use mr::{
    BackendMem, Deregistered, DeregisteredBytes, MemoryRegion, MrState, MrTable, PlacementStats,
    ProtectionDomain, ReadOnlyRegion, RegionBackend, StagSlot, TaggedAccess, TransferError,
};
pub use qp::{InvalidTransition, QpAttrs, QpConfig, QpEvent, QpState, MAX_PRIVATE_DATA};
pub use stag::{Access, PdId, QpNum, Stag};
pub use wr::{
    ChainWr, FileData, ReadWr, RecvWr, SendWr, WcOpcode, WorkCompletion, WrId, WriteFileWr, WriteWr,
};
