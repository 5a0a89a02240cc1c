//! A requester speaking raw RPC-over-RDMA version 1 headers over softrnic
//! (real iWARP on 127.0.0.1), for tests that send what a well-behaved
//! client would not (`hostile.rs`) or must control what is in flight
//! (`order.rs`); each test adds the calls it needs in an `impl Raw` of
//! its own.
#![allow(dead_code)]

use std::net::SocketAddr;
use std::time::{Duration, Instant};

use bytes::{Bytes, BytesMut};
use oncrpc::echo::{ECHO_PROGRAM, ECHO_VERSION, PROC_ECHO};
use oncrpc::{RpcService, Server};
use rnic::{
    Access, CompletionQueue, Device, MemoryRegion, ProtectionDomain, QpConfig, QpState, QueuePair,
    RecvWr, SendWr, WcOpcode,
};
use rpcrdma::transport::{RdmaListener, RdmaServerConfig};
use rpcrdma::wire::{v1, Limits, RdmaSegment, ReadSegment};
use softrnic::{SoftConfig, SoftDevice, SoftQp};

/// A softrnic device offering `max_ird` inbound RDMA Reads, without the
/// first-Send delay.
pub(crate) fn soft(seed: u64, max_ird: u16) -> SoftDevice {
    let cfg = SoftConfig {
        max_ird,
        first_send_delay: Duration::ZERO,
        ..SoftConfig::default()
    };
    SoftDevice::new(cfg, seed)
}

/// An RPC-over-RDMA server of `service` on 127.0.0.1, serving on its own
/// task; its address.
pub(crate) async fn serve_one<S: RpcService>(
    seed: u64,
    config: RdmaServerConfig,
    service: S,
) -> SocketAddr {
    let mut server = Server::new();
    server.register(service);
    let any: SocketAddr = "127.0.0.1:0".parse().unwrap();
    let listener = RdmaListener::bind(&soft(seed, 16), &any, std::sync::Arc::new(server), config)
        .await
        .unwrap();
    let addr = listener.local_addr();
    listener.spawn();
    addr
}

/// An echo call of `n` bytes, AUTH_NONE, as the RPC message.
pub(crate) fn echo_call(xid: u32, n: usize) -> Bytes {
    let mut v = Vec::new();
    for w in [xid, 0, 2, ECHO_PROGRAM, ECHO_VERSION, PROC_ECHO, 0, 0, 0, 0] {
        v.extend_from_slice(&u32::to_be_bytes(w));
    }
    v.extend_from_slice(&(n as u32).to_be_bytes());
    v.resize(v.len() + n.next_multiple_of(4), 7);
    v.into()
}

/// The raw requester: its queue pair (32 receives of 4 KiB posted), and
/// the regions its chunks name, kept registered.
pub(crate) struct Raw {
    pub(crate) qp: SoftQp,
    pub(crate) pd: ProtectionDomain,
    pub(crate) regions: Vec<MemoryRegion>,
    /// The next xid [`Raw::xid`] hands out.
    pub(crate) next: u32,
}

impl Raw {
    /// A requester offering `max_ird` inbound RDMA Reads (0: the server's
    /// reads of its chunks never run), connected to `addr`.
    pub(crate) async fn connect(seed: u64, max_ird: u16, addr: SocketAddr) -> Self {
        let dev = soft(seed, max_ird);
        let pd = dev.alloc_pd();
        let mut cfg = QpConfig::new(CompletionQueue::new(256));
        cfg.initial_recvs = (0..32)
            .map(|i| RecvWr {
                wr_id: i,
                buf: BytesMut::with_capacity(4096),
            })
            .collect();
        let qp = dev.connect(&pd, &addr, cfg).await.unwrap().qp;
        Self {
            qp,
            pd,
            regions: Vec::new(),
            next: 1,
        }
    }

    /// A fresh xid.
    pub(crate) fn xid(&mut self) -> u32 {
        let xid = self.next;
        self.next += 1;
        xid
    }

    /// Sends the transport header `xid`, `credits`, `body`, followed by
    /// `inline`.
    pub(crate) fn send(&self, xid: u32, credits: u32, body: v1::Body, inline: Bytes) {
        let header = xdr::to_bytes(&v1::Header { xid, credits, body });
        let data = if inline.is_empty() {
            vec![header]
        } else {
            vec![header, inline]
        };
        self.qp
            .post_send(SendWr {
                wr_id: u64::from(xid),
                data,
                ..Default::default()
            })
            .unwrap();
    }

    /// A Position-Zero Read chunk naming `msg`, registered for the
    /// server's RDMA Reads and kept, that claims `claimed` bytes (the
    /// claim may name more than is registered).
    pub(crate) fn position_zero(&mut self, msg: &[u8], claimed: u32) -> Vec<ReadSegment> {
        let mr = self
            .pd
            .register(BytesMut::from(msg), Access::REMOTE_READ)
            .unwrap();
        let reads = vec![ReadSegment {
            position: 0,
            target: RdmaSegment {
                handle: mr.stag().0,
                length: claimed,
                offset: mr.base_to(),
            },
        }];
        self.regions.push(mr);
        reads
    }

    /// The next transport header the server sends, `None` if none comes
    /// within `limit`.
    pub(crate) async fn header_within(&self, limit: Duration) -> Option<v1::Header> {
        let end = Instant::now() + limit;
        loop {
            let left = end.checked_duration_since(Instant::now())?;
            let wc = tokio::time::timeout(left, self.qp.recv_cq().next())
                .await
                .ok()?
                .ok()?;
            if wc.opcode == WcOpcode::Recv {
                let mut b = wc.buf?;
                b.truncate(wc.byte_len as usize);
                return Some(v1::Header::parse(&b, &Limits::default()).ok()?.0);
            }
        }
    }

    /// Whether the server closed the connection within `limit`.
    pub(crate) async fn closed_within(&self, limit: Duration) -> bool {
        let end = Instant::now() + limit;
        while Instant::now() < end {
            if self.qp.state() != QpState::Rts {
                return true;
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        false
    }
}
