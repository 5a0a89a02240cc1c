//! The sans-IO RPC-over-RDMA endpoint: the protocol decisions of the
//! requester and the responder as plain functions and state, with no
//! device, task or clock. The IO shells in `transport` feed it what the
//! device reports and carry out what it returns.
//!
//! - [`message`]: the one decode of each received message into one
//!   [`message::Kind`] (forward call, forward reply, reverse call, reverse
//!   reply, error, properties), by the receiving end's [`message::Role`].
//! - [`responder`]: the responder's state for one connection (credits,
//!   calls outstanding, version 2 properties) and its decisions, as
//!   events in and actions out.
//! - [`requester`]: the requester's rules for a reply: fall back to
//!   version 1, send again with larger resources, or complete.
//! - [`reads`]: where the RDMA Reads of a message's read chunks land in
//!   the rebuilt message (RFC 8166 §3.5), for either direction.

pub(crate) mod encode;
pub mod message;
pub mod reads;
pub mod requester;
pub mod responder;
