//! Hostile RPC-over-RDMA clients against `nfsrdma serve` in a child
//! process: calls whose read chunks claim 16 MiB and whose RDMA Reads the
//! client never answers (its device offers IRD 0, so the server's Read
//! Requests never run), and a client that sends more calls than the
//! credits it was granted. Each test checks that the server's memory
//! (VmRSS) stays within the read budget, that the offending connections are
//! closed and the limit that held is logged by name, and that a normal
//! client (`nfsrdma ls` over RDMA) is served within a second afterwards.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use bytes::{Bytes, BytesMut};
use rnic::{
    Access, CompletionQueue, Device, MemoryRegion, ProtectionDomain, QpConfig, QpState, QueuePair,
    RecvWr, SendWr,
};
use rpcrdma::wire::{v1, ChunkLists, RdmaSegment, ReadSegment};
use softrnic::{SoftConfig, SoftDevice, SoftQp};

mod support;

use support::TempDir;

const BIN: &str = env!("CARGO_BIN_EXE_nfsrdma");

fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .expect("an ephemeral port")
}

/// `nfsrdma serve` on free loopback ports, killed on drop; standard error
/// goes to a file read by [`Serve::log`].
struct Serve {
    child: Child,
    nfs: u16,
    mnt: u16,
    rdma: u16,
    export: TempDir,
    log: PathBuf,
}

impl Serve {
    fn start(tag: &str, extra: &[&str]) -> Self {
        let export = TempDir::new(tag);
        std::fs::write(export.0.join("data"), b"hello").unwrap();
        let log = export.0.with_extension("log");
        let (nfs, mnt, rdma) = (free_port(), free_port(), free_port());
        let child = Command::new(BIN)
            .arg("serve")
            .arg(&export.0)
            .arg("--state-dir")
            .arg(export.0.with_extension("state"))
            .args(["--addr", "127.0.0.1", "--port", &nfs.to_string()])
            .args(["--mount-port", &mnt.to_string()])
            .args(["--rdma-port", &rdma.to_string()])
            .args(extra)
            .stdout(Stdio::null())
            .stderr(std::fs::File::create(&log).unwrap())
            .spawn()
            .expect("spawn serve");
        let s = Self {
            child,
            nfs,
            mnt,
            rdma,
            export,
            log,
        };
        for port in [nfs, mnt, rdma] {
            let deadline = Instant::now() + Duration::from_secs(20);
            while std::net::TcpStream::connect(("127.0.0.1", port)).is_err() {
                assert!(Instant::now() < deadline, "server never listened on {port}");
                std::thread::sleep(Duration::from_millis(20));
            }
        }
        s
    }

    fn rdma_addr(&self) -> SocketAddr {
        SocketAddr::from(([127, 0, 0, 1], self.rdma))
    }

    /// A memory figure of the server from /proc (`VmRSS`, `VmData`), in KiB.
    fn vm_kib(&self, field: &str) -> u64 {
        let status = std::fs::read_to_string(format!("/proc/{}/status", self.child.id())).unwrap();
        status
            .lines()
            .find_map(|l| l.strip_prefix(field)?.strip_prefix(':'))
            .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
            .expect(field)
    }

    /// (resident, allocated) memory in KiB. Zeroed buffers are allocated
    /// without touching their pages, so VmData shows what a peer made the
    /// server reserve even when VmRSS does not (yet).
    fn memory_kib(&self) -> (u64, u64) {
        (self.vm_kib("VmRSS"), self.vm_kib("VmData"))
    }

    fn log(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }

    /// The server is up and `nfsrdma ls` over RDMA lists the export
    /// within a second.
    fn assert_serves_a_normal_client(&mut self) {
        let status = self.child.try_wait().unwrap();
        assert!(
            status.is_none(),
            "server exited: {status:?}\n{}",
            self.log()
        );
        let dir = self.export.0.display().to_string();
        let url = format!(
            "nfs+rdma://127.0.0.1:{}{dir}?mountport={}",
            self.rdma, self.mnt
        );
        let start = Instant::now();
        let out = Command::new(BIN).args(["ls", &url]).output().unwrap();
        let took = start.elapsed();
        assert!(
            out.status.success(),
            "ls {url}: {}\n{}",
            String::from_utf8_lossy(&out.stderr),
            self.log()
        );
        assert!(String::from_utf8_lossy(&out.stdout).contains("data"));
        assert!(took < Duration::from_secs(1), "ls {url} took {took:?}");
        let _ = self.nfs;
    }

    /// Waits up to `t` for `needle` in the server's log.
    fn logged_within(&self, needle: &str, t: Duration) -> bool {
        let end = Instant::now() + t;
        loop {
            if self.log().contains(needle) {
                return true;
            }
            if Instant::now() > end {
                return false;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }
}

impl Drop for Serve {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        let _ = std::fs::remove_file(&self.log);
        let _ = std::fs::remove_dir_all(self.export.0.with_extension("state"));
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
    let mut srv = Serve::start("hostile-rdma-reads", &["--rdma-read-timeout-ms", "2000"]);
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
    let mut srv = Serve::start("hostile-rdma-credits", &["--rdma-credits", "8"]);
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
