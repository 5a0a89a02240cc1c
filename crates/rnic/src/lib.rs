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
//!   [`MemoryRegion::invalidate`] hands it back.
//! - [`SendWr`], [`WriteWr`], [`ReadWr`], [`RecvWr`]: work requests;
//!   [`WorkCompletion`] with [`WcStatus`]: their results, queued on a
//!   [`CompletionQueue`] that can be polled or awaited without naming a runtime.
//! - [`QpState`] and its transition table ([`QpState::on`]).
//! - Errors: [`AccessError`] (maps to Terminate codes, RFC 5040 §4.8),
//!   [`TerminateCause`], [`PostError`], [`RegisterError`], [`CmError`],
//!   [`CqOverflow`].
#![forbid(unsafe_code)]
#![warn(missing_docs)]

pub mod conformance;
mod cq;
mod device;
mod error;
pub mod loopback;
mod mr;
mod qp;
mod stag;
mod wr;

pub use cq::{CompletionQueue, Next};
pub use device::{CloseReason, ConnectRequest, Connected, Device, Listener, QueuePair};
pub use error::{
    AccessError, CmError, CqOverflow, PostError, RegisterError, TerminateCause, WcStatus,
};
pub use mr::{
    Deregistered, MemoryRegion, MrState, MrTable, PlacementStats, ProtectionDomain, StagSlot,
    TaggedAccess, TransferError,
};
pub use qp::{InvalidTransition, QpAttrs, QpConfig, QpEvent, QpState, MAX_PRIVATE_DATA};
pub use stag::{Access, PdId, QpNum, Stag};
pub use wr::{ReadWr, RecvWr, SendWr, WcOpcode, WorkCompletion, WrId, WriteWr};
