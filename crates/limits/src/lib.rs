//! Bounds on what a peer can make a server hold.
//!
//! - [`Limit`]: a named bound with a trip counter and a rate-limited log
//!   line, declared as a `static` beside the code that enforces it.
//! - [`ConnLimiter`]: admission of connections by a total and a per client
//!   address cap, each admitted connection holding a [`ConnSlot`] until it
//!   closes.
//! - [`Waiters`]: a bounded count of callers waiting for a slot or credit,
//!   one more refused at once.
//! - [`Backoff`]: the pause before retrying a failed `accept` (descriptors
//!   exhausted, a connection aborted before it was accepted…), so a listener
//!   survives instead of ending or spinning.
//!
//! The crate depends on nothing but `tracing`, so every transport (ONC RPC
//! over TCP, the software RDMA device's connection manager, RPC-over-RDMA)
//! uses the same counters.
#![forbid(unsafe_code)]
#![warn(missing_docs)]

mod backoff;
mod conns;
mod limit;
mod waiters;

pub use backoff::Backoff;
pub use conns::{ConnLimiter, ConnLimits, ConnSlot, Refused};
pub use limit::{snapshot, trips, Limit};
pub use waiters::{Waiters, Waiting};
