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
//! - [`endpoint`]: the sans-IO endpoint: one decode of each received
//!   message ([`endpoint::message::classify`]) and the endpoint's
//!   decisions as state taking events and returning actions.
//! - [`ulb`]: the [`ulb::UpperLayerBinding`] trait an RPC program
//!   implements so a requester can size reply resources (RFC 8166 §6).
//!
//! - `transport` (feature `transport`, default): version 1 and 2 client and
//!   server endpoints over any `rnic::Device`, driving `oncrpc`.
//!
//! Outside `transport`, nothing here does IO or reads a clock.
//!
//! # Example: planning a call
//!
//! ```
//! use bytes::Bytes;
//! use rpcrdma::plan::{plan_call, InlineThresholds, Version};
//! use rpcrdma::ulb::ReplyHint;
//! use rpcrdma::wire::v1::Proc;
//! use xdr::{Encoder, XdrBuf};
//!
//! // An RPC call whose 100 KiB payload is DDP-eligible (an NFS WRITE).
//! let mut call = XdrBuf::new();
//! for w in 0..28u32 {
//!     call.put_u32(w);
//! }
//! call.put_bulk(Bytes::from(vec![7u8; 102_400]), true);
//! let t = InlineThresholds { send: 4096, recv: 4096 };
//! let plan = plan_call(&call, t, ReplyHint { max_inline: 200, ddp_max: None }, Version::V1)
//!     .unwrap();
//! assert_eq!(plan.proc_, Proc::RDMA_MSG);
//! assert_eq!(plan.read_chunks[0].position, 116); // after the length word
//! assert_eq!(plan.read_chunks[0].data.len(), 102_400); // no XDR pad
//! assert!(plan.header_len + plan.inline.len() <= 4096);
//! ```
#![forbid(unsafe_code)]
#![warn(missing_docs)]

pub mod credits;
pub mod endpoint;
pub mod layout;
pub mod plan;
#[cfg(feature = "transport")]
pub mod transport;
pub mod ulb;
pub mod wire;
