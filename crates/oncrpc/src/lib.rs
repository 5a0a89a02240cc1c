//! ONC RPC (RFC 5531): messages, authentication flavors, record marking,
//! sans-IO client and server cores, and a TCP transport.
#![forbid(unsafe_code)]

pub mod msg;
pub mod record;
