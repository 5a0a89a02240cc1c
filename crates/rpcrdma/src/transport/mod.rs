//! RPC-over-RDMA endpoints (version 1, and version 2 with negotiation) over any [`rnic::Device`]: a client
//! implementing [`oncrpc::ClientTransport`] ([`RdmaClient`]) and a server
//! driving an [`oncrpc::Server`] ([`RdmaListener`]).
//!
//! They are thin shells around the sans-IO core: [`crate::plan`] decides
//! the conveyance of every message, [`crate::credits`] bounds what is in
//! flight, [`crate::wire::v1`] encodes the headers and [`crate::wire::cm`]
//! the connection private data. Chunk memory is registered per call and
//! fenced (invalidated) before the call completes (RFC 8166 §3.4.3): the
//! buffers come back from the device only then.

//!
//! ```
//! # #[tokio::main(flavor = "current_thread")]
//! # async fn main() {
//! use std::sync::Arc;
//! use oncrpc::echo::{EchoClient, EchoService};
//! use rnic::loopback::LoopbackNetwork;
//! use rpcrdma::transport::{RdmaClient, RdmaClientConfig, RdmaListener, RdmaServerConfig};
//!
//! let net = LoopbackNetwork::new(1);
//! let (server_dev, client_dev) = (net.device(), net.device());
//! let mut services = oncrpc::Server::new();
//! services.register(EchoService::default());
//! let listener = RdmaListener::bind(
//!     &server_dev,
//!     &String::new(),
//!     Arc::new(services),
//!     RdmaServerConfig::default(),
//! )
//! .await
//! .unwrap();
//! let addr = listener.local_addr();
//! listener.spawn();
//! let client = RdmaClient::connect(&client_dev, &addr, RdmaClientConfig::default())
//!     .await
//!     .unwrap();
//! let data = bytes::Bytes::from(vec![7u8; 100_000]);
//! let echoed = EchoClient::new(client.clone()).echo(data.clone()).await.unwrap();
//! assert_eq!(echoed, data);
//! assert_eq!(client.stats().read_chunk_calls, 1);
//! # }
//! ```

mod bounds;
mod client;
mod order;
mod pool;
mod pull;
mod recv_pool;
mod reply;
mod server;
pub mod stats;
mod v2;
mod v2_reverse;

pub use client::{ClientStats, RdmaClient, RdmaClientConfig};
pub use oncrpc::tcp::ReconnectPolicy;
pub use server::{
    AcceptFilter, Backchannel, Backchannels, RdmaListener, RdmaServerConfig,
    DEFAULT_BACKCHANNEL_REPLY_WAIT, MAX_BACKCHANNEL_WAITERS,
};

use crate::endpoint::encode as hdr;
use crate::plan::InlineThresholds;
use crate::wire::cm::{CmFlags, CmPrivateData};

/// Receive buffers and inline size advertised by an endpoint.
fn private_data(inline: u32, send_with_invalidate_ok: bool) -> CmPrivateData {
    let flags = if send_with_invalidate_ok {
        CmFlags::SEND_WITH_INVALIDATE_OK
    } else {
        CmFlags::default()
    };
    CmPrivateData::new(flags, inline, inline)
}

/// Thresholds from our private data and the peer's (RFC 8797 §4).
fn thresholds(local: &CmPrivateData, peer: &[u8]) -> InlineThresholds {
    InlineThresholds::negotiate(local, Some(peer))
}
