//! `serve --metrics ADDR` and `nfsrdma stat ADDR`: after real clients (ls
//! over TCP and RDMA), a call to a program the server does not run, and a
//! connection flood past the per-client cap, the Prometheus endpoint and
//! the summary show the calls per procedure with latency, the rejected
//! call, the limit that tripped, and the open connections.

use std::io::Write;
use std::net::{SocketAddr, TcpStream};
use std::process::Command;
use std::time::{Duration, Instant};

use oncrpc::msg::{CallHeader, OpaqueAuth};
use oncrpc::record::encode_record;
use socket2::{Domain, Socket, Type};
use xdr::{Encode, XdrBuf};

mod support;

use support::serve::{free_port, ServeChild, BIN};

fn nfsrdma(args: &[&str]) -> String {
    let out = Command::new(BIN).args(args).output().expect("run nfsrdma");
    assert!(
        out.status.success(),
        "nfsrdma {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

fn connect_from(from: [u8; 4], to: SocketAddr) -> TcpStream {
    let s = Socket::new(Domain::IPV4, Type::STREAM, None).unwrap();
    s.bind(&SocketAddr::from((from, 0)).into()).unwrap();
    s.connect_timeout(&to.into(), Duration::from_secs(2))
        .unwrap();
    s.into()
}

/// A NULL call to program 200999, which no server runs.
fn unknown_program_call() -> Vec<u8> {
    let mut m = XdrBuf::new();
    CallHeader {
        xid: 77,
        prog: 200_999,
        vers: 1,
        proc_: 0,
        cred: OpaqueAuth::NONE,
        verf: OpaqueAuth::NONE,
    }
    .encode(&mut m);
    encode_record(&m).to_vec()
}

#[test]
fn stat_shows_calls_rejections_limit_trips_and_connections() {
    let metrics = format!("127.0.0.1:{}", free_port());
    let srv = ServeChild::start(
        "metrics",
        &["--metrics", &metrics, "--max-connections-per-client", "3"],
        |dir| std::fs::write(dir.join("data"), b"hello").unwrap(),
    );
    for scheme in ["nfs", "nfs+rdma"] {
        assert!(nfsrdma(&["ls", "-l", &srv.url(scheme, "")]).contains("data"));
    }
    let v41 = format!("{}&version=4.1", srv.url("nfs", ""));
    assert!(nfsrdma(&["ls", "-l", &v41]).contains("data"));
    let nfs = SocketAddr::from(([127, 0, 0, 1], srv.nfs));
    let mut s = TcpStream::connect(nfs).unwrap();
    s.write_all(&unknown_program_call()).unwrap();
    // Five connections from another address: two past the cap of three.
    let flood: Vec<TcpStream> = (0..5).map(|_| connect_from([127, 0, 0, 4], nfs)).collect();
    let deadline = Instant::now() + Duration::from_secs(10);
    let out = loop {
        let out = nfsrdma(&["stat", &metrics]);
        let done = out.contains("tcp.connections_per_client 2") && out.contains("prog_unavail 1");
        if done || Instant::now() > deadline {
            break out;
        }
        std::thread::sleep(Duration::from_millis(200));
    };
    assert!(out.contains("limits tripped: "), "{out}");
    assert!(out.contains("tcp.connections_per_client 2"), "{out}");
    assert!(out.contains("rejected calls: prog_unavail 1"), "{out}");
    let open: usize = out
        .lines()
        .find_map(|l| l.strip_prefix("connections open: "))
        .and_then(|n| n.trim().parse().ok())
        .unwrap_or_else(|| panic!("{out}"));
    assert!(
        open >= 4,
        "the raw connection and the three admitted: {out}"
    );
    // The two ls runs: MOUNT's MNT and NFSv3 calls, with latencies.
    let row = |prog: &str, procedure: &str| {
        out.lines()
            .map(|l| l.split_whitespace().collect::<Vec<_>>())
            .find(|c| c.len() == 6 && c[0] == prog && c[2] == procedure)
            .unwrap_or_else(|| panic!("no {prog} {procedure} row: {out}"))
    };
    let mnt = row("mount", "MNT");
    assert_eq!(mnt[3], "2", "{out}");
    let fsinfo = row("nfs", "FSINFO");
    assert!(fsinfo[3].parse::<u64>().unwrap() >= 2, "{out}");
    assert!(fsinfo[5].parse::<f64>().unwrap() > 0.0, "{out}");
    // The NFSv4.1 ls: its operations inside COMPOUNDs, by minor version.
    for op in ["SEQUENCE", "PUTROOTFH", "READDIR"] {
        let r = row("nfs4", op);
        assert_eq!(r[1], "1", "{out}");
        assert!(r[3].parse::<u64>().unwrap() >= 1, "{out}");
    }
    drop(flood);
}

/// The value of the unlabelled series `name` on the metrics page.
fn series(page: &str, name: &str) -> f64 {
    page.lines()
        .find_map(|l| l.strip_prefix(name)?.strip_prefix(' ')?.trim().parse().ok())
        .unwrap_or(0.0)
}

fn page(metrics: &str) -> String {
    let mut s = TcpStream::connect(metrics).unwrap();
    write!(
        s,
        "GET /metrics HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n"
    )
    .unwrap();
    let mut body = String::new();
    std::io::Read::read_to_string(&mut s, &mut body).unwrap();
    body
}

/// After a file copied in and one read out over RPC-over-RDMA, the
/// transport totals show the WRITE data pulled from read chunks by RDMA
/// Read and the READ data pushed into write chunks by RDMA Write; a
/// connection held open shows its own figures (credits granted, bytes by
/// write chunk) on the page and in `nfsrdma stat`.
#[test]
fn rdma_transport_figures_move_with_chunked_traffic() {
    const LEN: usize = 1 << 20;
    let metrics = format!("127.0.0.1:{}", free_port());
    let srv = ServeChild::start(
        "metrics-rdma",
        &["--metrics", &metrics, "--no-root-squash"],
        |dir| std::fs::write(dir.join("big"), vec![0x5a; LEN]).unwrap(),
    );
    let local = srv.export.0.with_extension("src");
    std::fs::write(&local, vec![0xa5; LEN]).unwrap();
    nfsrdma(&["cp", local.to_str().unwrap(), &srv.url("nfs+rdma", "copy")]);
    let _ = std::fs::remove_file(&local);
    // An NFSv3/RDMA client of our own, kept connected while we look.
    let rt = tokio::runtime::Runtime::new().unwrap();
    let dev = softrnic::SoftDevice::new(softrnic::SoftConfig::default(), 7);
    let target = nfs_client::RdmaTarget {
        host: "127.0.0.1".into(),
        rdma_port: Some(srv.rdma),
        mount_port: Some(srv.mnt),
        path: format!("{}/big", srv.export.0.display()),
    };
    let m = rt.block_on(async {
        let m = nfs_client::connect_rdma(&dev, &target, &nfs_client::RdmaOptions::default())
            .await
            .unwrap();
        let f = m.mount.resolve(&m.rest).await.unwrap();
        assert_eq!(m.mount.read_file(&f.fh).await.unwrap().len(), LEN);
        m
    });
    let deadline = Instant::now() + Duration::from_secs(10);
    let (page, out) = loop {
        let o = nfsrdma(&["stat", &metrics]);
        let p = page(&metrics);
        let ours = o
            .lines()
            .any(|l| l.starts_with("  conn ") && l.contains("+ write 1048576 B"))
            && series(&p, "rpcrdma_write_chunk_bytes") >= LEN as f64;
        if ours || Instant::now() > deadline {
            break (p, o);
        }
        std::thread::sleep(Duration::from_millis(200));
    };
    assert!(
        series(&page, "rpcrdma_read_chunk_bytes") >= LEN as f64,
        "{page}"
    );
    assert!(series(&page, "rpcrdma_rdma_reads") >= 1.0, "{page}");
    assert!(
        series(&page, "rpcrdma_write_chunk_bytes") >= LEN as f64,
        "{page}"
    );
    assert!(series(&page, "rpcrdma_rdma_writes") >= 1.0, "{page}");
    assert!(series(&page, "rpcrdma_messages_received") >= 2.0, "{page}");
    assert!(series(&page, "rpcrdma_sends") >= 2.0, "{page}");
    assert!(series(&page, "rpcrdma_credits_granted") >= 1.0, "{page}");
    assert_eq!(series(&page, "rpcrdma_errors_sent"), 0.0, "{page}");
    assert!(out.contains("rpc-over-rdma: received"), "{out}");
    // Per connection: the cp's pulled the file from read chunks, ours
    // had it pushed into write chunks.
    let figure = |line: &str, what: &str| -> f64 {
        line.split(what)
            .nth(1)
            .and_then(|r| r.split(' ').next())
            .and_then(|n| n.parse().ok())
            .unwrap_or(0.0)
    };
    let conns: Vec<&str> = out.lines().filter(|l| l.starts_with("  conn ")).collect();
    assert!(
        conns.iter().any(|l| figure(l, "+ read ") >= LEN as f64),
        "{out}"
    );
    assert!(
        conns
            .iter()
            .any(|l| figure(l, "+ write ") >= LEN as f64 && !l.ends_with("credits 0/0")),
        "{out}"
    );
    drop(m);
}
