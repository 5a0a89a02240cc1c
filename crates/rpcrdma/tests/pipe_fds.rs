//! The descriptors a client can make an RPC-over-RDMA server on softrnic
//! hold (docs/hardening.md, "Connections and listeners"): each connection
//! is a socket, and one whose replies were sent from a file (RDMA Writes
//! from the page cache) also a pipe, two descriptors, made at its first
//! such reply. A client opening connections up to and past the server's
//! connection cap, each reading a file range by write chunk, leaves the
//! process holding at most the cap's worth of pipes and sockets; closing
//! them gives every descriptor back, round after round, also when they
//! close with replies from the file in flight.
//!
//! Its own test binary: it counts the process's descriptors
//! (`/proc/self/fd`), which another test running beside it would change.
#![cfg(feature = "transport")]

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::{Duration, Instant};

use oncrpc::client::ClientTransport;
use oncrpc::limits::{ConnLimiter, ConnLimits};
use oncrpc::Server;
use rpcrdma::transport::{RdmaClient, RdmaClientConfig, RdmaListener, RdmaServerConfig};
use softrnic::{SoftConfig, SoftDevice};
use testkit::ranges::{call, parse, pattern, temp_file, Ranges};

/// The server's connection cap.
const CAP: usize = 6;

/// Connections tried each round: the cap and as many again.
const TRIED: usize = 2 * CAP;

/// The process's open descriptors: (pipes, sockets, all).
fn fds() -> (usize, usize, usize) {
    let (mut pipes, mut sockets, mut all) = (0, 0, 0);
    for e in std::fs::read_dir("/proc/self/fd").unwrap().flatten() {
        all += 1;
        match std::fs::read_link(e.path()) {
            Ok(l) if l.to_string_lossy().starts_with("pipe:") => pipes += 1,
            Ok(l) if l.to_string_lossy().starts_with("socket:") => sockets += 1,
            _ => {}
        }
    }
    (pipes, sockets, all)
}

/// Waits up to 10 s for the descriptors to come back to `base` (the
/// closed connections' tasks end asynchronously); what is left then.
async fn settle(base: (usize, usize, usize)) -> (usize, usize, usize) {
    let until = Instant::now() + Duration::from_secs(10);
    loop {
        let now = fds();
        if (now.0 <= base.0 && now.1 <= base.1 && now.2 <= base.2) || Instant::now() > until {
            return now;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn connections_past_the_cap_hold_bounded_pipes_and_closing_them_frees_every_descriptor() {
    const LEN: usize = 256 << 10;
    let sdev = SoftDevice::new(SoftConfig::default(), 70);
    let cdev = SoftDevice::new(SoftConfig::default(), 71);
    let mut server = Server::new();
    server.register(Ranges {
        file: temp_file("pipe-fds", LEN),
    });
    let any: SocketAddr = "127.0.0.1:0".parse().unwrap();
    let limits = ConnLimits {
        max_total: CAP,
        max_per_client: 4 * CAP,
    };
    let listener = RdmaListener::bind(&sdev, &any, Arc::new(server), RdmaServerConfig::default())
        .await
        .unwrap()
        .with_conn_limiter(ConnLimiter::new(limits));
    let addr = listener.local_addr();
    listener.spawn();
    let want = pattern(LEN);
    let base = fds();
    for round in 0..3 {
        let refused_before = oncrpc::limits::trips("rdma.connections");
        let mut clients = Vec::new();
        let mut refused = 0;
        for _ in 0..TRIED {
            match RdmaClient::connect(&cdev, &addr, RdmaClientConfig::default()).await {
                Ok(c) => {
                    // A reply by write chunk, sent from the file: the
                    // server's queue pair makes its pipe.
                    let r = c.call(call(3, LEN as u32 - 3, true)).await.unwrap();
                    let (files, got) = parse(&r);
                    assert!(files);
                    assert!(got[..] == want[3..]);
                    assert!(c.stats().write_chunk_replies >= 1);
                    clients.push(c);
                }
                Err(_) => refused += 1,
            }
        }
        assert_eq!(clients.len(), CAP, "round {round}: connections admitted");
        assert_eq!(refused, TRIED - CAP, "round {round}: refused");
        assert!(oncrpc::limits::trips("rdma.connections") >= refused_before + refused as u64);
        let held = fds();
        let per_conn = |n: usize, b: usize| n.saturating_sub(b);
        // The pipes were made (so this checks them), one per admitted
        // connection and none for a refused one.
        assert_eq!(
            per_conn(held.0, base.0),
            2 * CAP,
            "round {round}: pipe fds held {held:?}, before {base:?}"
        );
        // Each admitted connection: the server's socket, its pipe, the
        // client's socket, and a few more for the runtime's and the
        // devices' own: cap x 4 + 8 in all (measured: cap x 4).
        assert!(
            per_conn(held.2, base.2) <= CAP * 4 + 8,
            "round {round}: {held:?} held, before {base:?}"
        );
        // The last round closes while replies from the file are in
        // flight: the server's sends fail midway (its error path).
        let mut flying = Vec::new();
        for c in clients.into_iter().map(Arc::new) {
            if round == 2 {
                for _ in 0..4 {
                    let c = Arc::clone(&c);
                    flying.push(tokio::spawn(async move {
                        c.call(call(0, LEN as u32, true)).await
                    }));
                }
                tokio::task::yield_now().await;
            }
            c.close();
        }
        for f in flying {
            // Answered before the close, or failed by it.
            let _ = f.await.unwrap();
        }
        let after = settle(base).await;
        assert!(
            after.0 <= base.0 && after.1 <= base.1 && after.2 <= base.2,
            "round {round}: closed connections left {after:?}, before {base:?}"
        );
    }
}
