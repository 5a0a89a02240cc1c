//! ONC RPC (RFC 5531): messages, authentication flavors, record marking,
//! sans-IO client and server cores, and a TCP transport.
//!
//! - [`msg`]: call and reply headers (RFC 5531 §9), AUTH_NONE / AUTH_SYS
//!   (§10, Appendix A), status codes as open newtypes.
//! - [`record`]: record marking (§11) as a sans-IO deframer with a record
//!   size bound, and a framer that writes gather buffers without flattening.
//! - [`server`]: the sans-IO server core ([`Server`], [`RpcService`]):
//!   dispatch by program/version/procedure and the RFC 5531 error replies.
//! - [`drc`]: the duplicate-request cache.
//! - [`client`]: the sans-IO client core ([`ClientCore`]) and the
//!   [`ClientTransport`] trait shared by TCP and RPC-over-RDMA.
//! - [`limits`]: named bounds with trip counters and rate-limited log lines.
//! - [`echo`]: a test program (0x20004E52) with NULL and ECHO.
//! - [`gss`]: RPCSEC_GSS version 1 (RFC 2203): the server's context table
//!   and call verification ([`Server::with_gss`]), the client's
//!   [`gss::GssClient`], the mechanism behind a trait (Kerberos in the
//!   `gss` crate).
//! - [`tls`]: RPC-over-TLS (RFC 9289) without IO: the AUTH_TLS probe, its
//!   answer, and a connection's [`TransportSecurity`].
//! - `tcp` (feature `tokio`, on by default): [`tcp::TcpServer`] and
//!   [`tcp::TcpClient`], plain or upgraded to TLS with rustls
//!   (`tcp::ServerTls`, `tcp::ClientTls`).
//!
//! # Fuzzing
//!
//! Targets `oncrpc_record` (the deframer fed arbitrary chunks) and
//! `oncrpc_msg` (call and reply decoding) live in `fuzz/` at the workspace
//! root:
//!
//! ```text
//! RUSTC_BOOTSTRAP=1 cargo fuzz run oncrpc_msg -- -max_total_time=30
//! ```
#![forbid(unsafe_code)]

pub mod client;
pub mod drc;
pub mod echo;
pub mod gss;
pub mod msg;
pub mod record;
pub mod server;
pub mod stats;
#[cfg(feature = "tokio")]
pub mod tcp;
pub mod tls;

pub use client::{ClientCore, ClientTransport, ReplyHint, RpcCall, RpcError};
/// Named bounds with trip counters (the `limits` crate, re-exported).
pub use limits;
pub use server::{
    AcceptedCall, CallContext, PeerInfo, RpcService, Server, ServiceError, TransportKind,
};
pub use tls::TransportSecurity;
