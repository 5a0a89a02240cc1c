//! RPC-over-RDMA versions 1 (RFC 8166, RFC 8167, RFC 8797) and 2
//! (draft-cel-nfsv4-rpcrdma-version-two): transport headers, chunks,
//! credits and chunk planning, sans-IO.
//!
//! - [`wire`]: header codecs. [`wire::v1::Header`], [`wire::v2::Header`],
//!   the shared [`wire::Prefix`] peek (answer an unknown version with
//!   ERR_VERS even when the body is garbage) and [`wire::cm`], the RFC 8797
//!   connection private data.
//! - [`credits`]: requester and responder credit accounting
//!   (RFC 8166 §3.3).
//! - [`plan`]: inline thresholds and the conveyance decision for calls and
//!   replies (RFC 8166 §3.5), and the receiver's reassembly of the full
//!   XDR stream from inline bytes and chunk data.
//! - [`ulb`]: the [`ulb::UpperLayerBinding`] trait an RPC program
//!   implements so a requester can size reply resources (RFC 8166 §6).
//!
//! - `transport` (feature `transport`, default): version 1 client and
//!   server endpoints over any `rnic::Device`, driving `oncrpc`.
//!
//! Outside `transport`, nothing here does IO or reads a clock.
#![forbid(unsafe_code)]

pub mod credits;
pub mod plan;
#[cfg(feature = "transport")]
pub mod transport;
pub mod ulb;
pub mod wire;
