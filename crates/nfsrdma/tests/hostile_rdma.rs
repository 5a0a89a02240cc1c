//! Hostile RPC-over-RDMA clients against `nfsrdma serve` in a child
//! process: calls whose read chunks claim 16 MiB and whose RDMA Reads the
//! client never answers (its device offers IRD 0, so the server's Read
//! Requests never run), and a client that sends more calls than the
//! credits it was granted. Each test checks that the server's memory
//! (VmRSS) stays within the read budget, that the offending connections are
//! closed and the limit that held is logged by name, and that a normal
//! client (`nfsrdma ls` over RDMA) is served afterwards.

use std::net::SocketAddr;
use std::time::{Duration, Instant};

use bytes::{Bytes, BytesMut};
use rnic::{
    Access, CompletionQueue, Device, MemoryRegion, ProtectionDomain, QpConfig, QpState, QueuePair,
    RecvWr, SendWr,
};
use rpcrdma::wire::{v1, ChunkLists, RdmaSegment, ReadSegment};
use softrnic::{SoftConfig, SoftDevice, SoftQp};

mod support;

use support::serve::ServeChild as Serve;

/// The server under attack, exporting a small file `data`.
fn serve(tag: &str, extra: &[&str]) -> Serve {
    Serve::start(tag, extra, |dir| {
        std::fs::write(dir.join("data"), b"hello").unwrap()
    })
}

impl Serve {
    fn rdma_addr(&self) -> SocketAddr {
        SocketAddr::from(([127, 0, 0, 1], self.rdma))
    }

    /// (resident, allocated) memory in KiB. Zeroed buffers are allocated
    /// without touching their pages, so VmData shows what a peer made the
    /// server reserve even when VmRSS does not (yet).
    fn memory_kib(&self) -> (u64, u64) {
        (self.vm_kib("VmRSS"), self.vm_kib("VmData"))
    }

    /// The server is up and `nfsrdma ls` over RDMA lists the export
    /// (see [`Serve::assert_lists_data`]).
    fn assert_serves_a_normal_client(&mut self) {
        self.assert_alive();
        self.assert_lists_data("nfs+rdma");
    }
}

/// An RPC-over-RDMA requester on a device offering IRD 0: the server may
/// post RDMA Reads of its chunks but they never run. Each call is an
/// RDMA_NOMSG whose Position-Zero Read chunk claims `claimed` bytes.
struct Stalling {
    qp: SoftQp,
    pd: ProtectionDomain,
    regions: Vec<MemoryRegion>,
    next: u32,
}

impl Stalling {
    async fn connect(seed: u64, addr: SocketAddr) -> Self {
        let dev = SoftDevice::new(
            SoftConfig {
                max_ird: 0,
                first_send_delay: Duration::ZERO,
                ..SoftConfig::default()
            },
            seed,
        );
        let pd = dev.alloc_pd();
        let mut cfg = QpConfig::new(CompletionQueue::new(256));
        cfg.max_send_wr = 128;
        cfg.initial_recvs = (0..8)
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

    fn call(&mut self, claimed: u32) {
        let xid = self.next;
        self.next += 1;
        // NFS NULL; only these bytes are registered, the claim says more.
        let mut msg = Vec::new();
        for w in [xid, 0, 2, 100_003, 3, 0, 0, 0, 0, 0] {
            msg.extend_from_slice(&u32::to_be_bytes(w));
        }
        let mr = self
            .pd
            .register(BytesMut::from(&msg[..]), Access::REMOTE_READ)
            .unwrap();
        let header: Bytes = xdr::to_bytes(&v1::Header {
            xid,
            credits: 64,
            body: v1::Body::NoMsg(ChunkLists {
                reads: vec![ReadSegment {
                    position: 0,
                    target: RdmaSegment {
                        handle: mr.stag().0,
                        length: claimed,
                        offset: mr.base_to(),
                    },
                }],
                ..ChunkLists::default()
            }),
        });
        self.regions.push(mr);
        self.qp
            .post_send(SendWr {
                wr_id: u64::from(xid),
                data: vec![header],
                ..Default::default()
            })
            .unwrap();
    }

    fn closed(&self) -> bool {
        self.qp.state() != QpState::Rts
    }
}

async fn all_closed_within(conns: &[Stalling], t: Duration) -> bool {
    let end = Instant::now() + t;
    while Instant::now() < end {
        if conns.iter().all(Stalling::closed) {
            return true;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    false
}

/// The issue 12 case: 3 connections × 60 calls, each claiming a 16 MiB
/// read chunk the client never lets the server pull (before the bounds:
/// 212 MB → 1.34 GB RSS, held forever). Now each connection holds at most
/// its 64 MiB read budget, and the read timeout closes it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn unanswered_read_chunks_hold_at_most_the_budget_and_time_out() {
    let mut srv = serve("hostile-rdma-reads", &["--rdma-read-timeout-ms", "2000"]);
    srv.assert_serves_a_normal_client();
    let before = srv.memory_kib();
    let mut conns = Vec::new();
    for seed in 0..3 {
        let mut c = Stalling::connect(100 + seed, srv.rdma_addr()).await;
        for _ in 0..60 {
            c.call(16 << 20);
        }
        conns.push(c);
    }
    tokio::time::sleep(Duration::from_millis(700)).await;
    let during = srv.memory_kib();
    assert!(
        srv.logged_within("rdma.read_bytes_per_conn", Duration::from_secs(2)),
        "{}",
        srv.log()
    );
    // Three connections' budgets (3 × 64 MiB) plus slack for the runtime;
    // without the budget the allocations reach 2.9 GB (VmData).
    let budget_kib = (3 * 64 + 64) * 1024;
    assert!(
        during.0.saturating_sub(before.0) < budget_kib
            && during.1.saturating_sub(before.1) < budget_kib,
        "(VmRSS, VmData) {before:?} KiB → {during:?} KiB under the flood"
    );
    assert!(
        all_closed_within(&conns, Duration::from_secs(5)).await,
        "connections still open after the read timeout\n{}",
        srv.log()
    );
    assert!(srv.logged_within("rdma.read_timeout", Duration::from_secs(1)));
    srv.assert_serves_a_normal_client();
    eprintln!(
        "(VmRSS, VmData) before {before:?} KiB, under the flood {during:?} KiB, after {:?} KiB",
        srv.memory_kib()
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_client_beyond_its_credits_is_cut_off() {
    let mut srv = serve("hostile-rdma-credits", &["--rdma-credits", "8"]);
    let mut c = Stalling::connect(200, srv.rdma_addr()).await;
    for _ in 0..8 {
        c.call(4096);
    }
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert!(!c.closed(), "closed with calls within the credits");
    c.call(4096);
    let conns = [c];
    assert!(
        all_closed_within(&conns, Duration::from_secs(2)).await,
        "a ninth call on 8 credits left the connection open"
    );
    assert!(srv.logged_within("rdma.calls_beyond_credits", Duration::from_secs(1)));
    srv.assert_serves_a_normal_client();
}
